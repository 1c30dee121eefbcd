//! Sharing a big batch of per-item work between cores.
//!
//! A first pass carries a whole history: thousands of messages to parse, render and count,
//! each independent of the others. A steady step carries one, and a thread would cost more
//! than it saves, so only batches over [`PARALLEL_MIN_WORK`] are split.

use std::sync::OnceLock;

/// Work (roughly, bytes to process) below which a batch stays on the calling thread.
pub const PARALLEL_MIN_WORK: usize = 1 << 20;

/// At most this many threads share a batch.
pub const PARALLEL_MAX_THREADS: usize = 4;

/// `work(position, item)` for every item, in order, returning the results in order. When the
/// items' total `weight` is at least [`PARALLEL_MIN_WORK`], they are cut into contiguous runs
/// of about equal weight, one per available core, each on its own scoped thread (the calling
/// thread takes the last run). A panic in a run is resumed on the calling thread.
pub fn map_weighted<T: Send, R: Send>(
    items: &mut [T],
    weight: impl Fn(usize, &T) -> usize,
    work: impl Fn(usize, &mut T) -> R + Sync,
) -> Vec<R> {
    let run = |offset: usize, items: &mut [T]| -> Vec<R> {
        items
            .iter_mut()
            .enumerate()
            .map(|(i, item)| work(offset + i, item))
            .collect()
    };
    let weights: Vec<usize> = items.iter().enumerate().map(|(p, item)| weight(p, item)).collect();
    let total: usize = weights.iter().sum();
    if total < PARALLEL_MIN_WORK {
        return run(0, items);
    }
    let threads = cores().min(PARALLEL_MAX_THREADS);
    if threads < 2 {
        return run(0, items);
    }
    // Cut where the running weight crosses each thread's share.
    let mut cuts = Vec::with_capacity(threads);
    let mut running = 0;
    for (position, w) in weights.iter().enumerate() {
        running += w;
        if running * threads >= total * (cuts.len() + 1) && cuts.len() + 1 < threads {
            cuts.push(position + 1);
        }
    }
    std::thread::scope(|scope| {
        let run = &run;
        let mut rest = items;
        let mut start = 0;
        let mut handles = Vec::with_capacity(cuts.len());
        for cut in cuts {
            let (head, tail) = rest.split_at_mut(cut - start);
            let offset = start;
            handles.push(scope.spawn(move || run(offset, head)));
            rest = tail;
            start = cut;
        }
        let last = run(start, rest);
        let mut results = Vec::with_capacity(weights.len());
        for handle in handles {
            results.extend(handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
        }
        results.extend(last);
        results
    })
}

/// Cores this process may use, asked once: the answer reads cgroup files on Linux.
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::thread;

    #[test]
    fn a_batch_shared_between_threads_comes_back_in_order_with_every_item_seen_once() {
        let mut items: Vec<(usize, u32)> = (0..1001).map(|i| (i, 0)).collect();
        // Uneven weights, all over the threshold, so the batch is cut into runs.
        let results = map_weighted(
            &mut items,
            |position, _| PARALLEL_MIN_WORK * (1 + position % 7),
            |position, item| {
                item.1 += 1;
                (position, item.0, thread::current().id())
            },
        );
        assert_eq!(results.len(), 1001);
        for (i, (position, value, _)) in results.iter().enumerate() {
            assert_eq!((*position, *value), (i, i));
            assert_eq!(items[i].1, 1, "item {i} seen once");
        }
        let threads: HashSet<_> = results.iter().map(|r| r.2).collect();
        assert_eq!(threads.len(), cores().clamp(1, PARALLEL_MAX_THREADS));
    }

    #[test]
    fn a_small_batch_stays_on_the_calling_thread() {
        let mut items = vec![(); 10];
        let caller = thread::current().id();
        let threads = map_weighted(&mut items, |_, _| 1, |_, _| thread::current().id());
        assert!(threads.iter().all(|t| *t == caller));
    }

    #[test]
    fn a_panic_in_a_run_reaches_the_caller() {
        let mut items: Vec<usize> = (0..100).collect();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            map_weighted(&mut items, |_, _| PARALLEL_MIN_WORK, |_, item| assert_ne!(*item, 3))
        }));
        assert!(outcome.is_err());
    }
}
