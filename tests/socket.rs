//! Socket and inspect black-box tests: being written.
