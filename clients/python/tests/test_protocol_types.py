"""The hand-written types, errors and method signatures match protocol/openrpc.json.

openrpc.json is generated from the daemon's Rust types, so these checks make any protocol
change that the Python client does not mirror fail here, naming what to update.
"""

import inspect
import typing
from typing import Any, Dict, Optional

import pytest

import satchel_client
from satchel_client import AsyncClient, Client, errors, types

#: Protocol method -> client method name.
METHODS = {
    "initialize": "initialize",
    "context.prepare": "prepare",
    "context.compact": "compact",
    "context.read": "read",
    "context.inspect": "inspect",
    "context.sessions": "sessions",
    "context.watch": "watch",
    "context.usage": "usage",
    "context.expand": "expand",
    "context.pin": "pin",
    "context.unpin": "unpin",
    "context.purge": "purge",
    "memory.write": "memory_write",
    "memory.append": "memory_append",
    "memory.get": "memory_get",
    "memory.search": "memory_search",
    "memory.merge": "memory_merge",
    "memory.status": "memory_status",
    "candidates.observe": "candidates_observe",
    "candidates.feedback": "candidates_feedback",
    "candidates.list": "candidates_list",
    "candidates.evaluate": "candidates_evaluate",
    "candidates.remove": "candidates_remove",
}

#: TypedDicts of server->client traffic, which openrpc.json does not describe.
NOT_IN_OPENRPC = {"ChatMessage", "SummarizerCompleteParams", "SummarizerCompleteResult"}


def schemas(openrpc: dict) -> Dict[str, dict]:
    """Every named schema: each method's params and result and each notification's params by
    title, and all their ``$defs``."""
    found = [p["schema"] for m in openrpc["methods"] for p in m["params"]]
    found += [m["result"]["schema"] for m in openrpc["methods"]]
    found += [n["params"] for n in openrpc.get("x-satchel-notifications", []) if "title" in n["params"]]
    named: Dict[str, dict] = {}
    for schema in found:
        named[schema["title"]] = schema
        named.update(schema.get("$defs", {}))
    return named


def typed_dicts() -> Dict[str, type]:
    return {
        name: cls
        for name, cls in vars(types).items()
        if isinstance(cls, type) and issubclass(cls, dict) and not name.startswith("_")
    }


def ref_name(schema: dict) -> Optional[str]:
    ref = schema.get("$ref")
    return ref.rsplit("/", 1)[-1] if ref else None


def schema_shape(schema: Any, named: Dict[str, dict]) -> frozenset:
    """A comparable description of what a JSON schema allows, as a set of alternatives."""
    if schema is True or schema == {} or (isinstance(schema, dict) and set(schema) <= {"description", "default"}):
        return frozenset({"any"})
    shapes = set()
    if "const" in schema:
        return frozenset({("literal", frozenset({schema["const"]}))})
    name = ref_name(schema)
    if name:
        target = named[name]
        if "oneOf" in target and all("const" in alt for alt in target["oneOf"]):
            shapes.add(("literal", frozenset(alt["const"] for alt in target["oneOf"])))
        elif "anyOf" in target and "properties" not in target:  # an untagged union of scalars
            shapes |= schema_shape({"anyOf": target["anyOf"]}, named)
        else:
            shapes.add(name)
    for alt in schema.get("anyOf", []):
        shapes |= schema_shape(alt, named)
    kinds = schema.get("type", [])
    for kind in [kinds] if isinstance(kinds, str) else kinds:
        if kind == "array":
            shapes.add(("array", schema_shape(schema.get("items", True), named)))
        elif kind == "object" and isinstance(schema.get("additionalProperties"), dict):
            shapes.add(("object", schema_shape(schema["additionalProperties"], named)))
        else:
            shapes.add(kind)  # string, integer, number, boolean, null, object
    return frozenset(shapes)


#: Keyword arguments named in snake_case for params LSP names in camelCase.
CAMEL_CASE = {"work_done_token": "workDoneToken"}

PRIMITIVES = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def python_shape(annotation: Any) -> frozenset:
    """The same description for a Python annotation."""
    if annotation is Any:
        return frozenset({"any"})
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Union:
        return frozenset().union(*(python_shape(a) for a in args))
    if origin is typing.Literal:
        return frozenset({("literal", frozenset(args))})
    if origin is list:
        return frozenset({("array", python_shape(args[0]))})
    if origin is dict:
        return frozenset({"object" if args[1] is Any else ("object", python_shape(args[1]))})
    if annotation in PRIMITIVES:
        return frozenset({PRIMITIVES[annotation]})
    if isinstance(annotation, type) and issubclass(annotation, dict):
        if annotation.__name__.endswith("Action"):  # variants of the Action union
            return frozenset({"Action"})
        return frozenset({annotation.__name__})
    raise AssertionError(f"unexpected annotation {annotation!r}")


def check_typed_dict(cls: type, schema: dict, named: Dict[str, dict]) -> None:
    hints = typing.get_type_hints(cls)
    properties = schema.get("properties", {})
    assert set(hints) == set(properties), (
        f"{cls.__name__}: keys differ from openrpc.json: "
        f"missing {sorted(set(properties) - set(hints))}, extra {sorted(set(hints) - set(properties))}"
    )
    assert set(cls.__required_keys__) == set(schema.get("required", [])), f"{cls.__name__}: required keys differ"
    for key, annotation in hints.items():
        declared, expected = python_shape(annotation), schema_shape(properties[key], named)
        assert declared == expected, f"{cls.__name__}.{key}: type {set(declared)} differs from {set(expected)}"


def test_every_typed_dict_matches_its_schema(openrpc: dict) -> None:
    named = schemas(openrpc)
    for name, cls in typed_dicts().items():
        if name in NOT_IN_OPENRPC or name.endswith("Action"):
            continue
        assert name in named, f"types.{name} has no schema of that name in openrpc.json"
        check_typed_dict(cls, named[name], named)


def test_every_object_schema_has_a_typed_dict(openrpc: dict) -> None:
    named = schemas(openrpc)
    objects = {name for name, schema in named.items() if "properties" in schema}
    missing = objects - set(typed_dicts())
    assert not missing, f"add these openrpc.json schemas to satchel_client/types.py: {sorted(missing)}"


def test_literal_aliases_match_enumerations(openrpc: dict) -> None:
    named = schemas(openrpc)
    for name, schema in named.items():
        if "oneOf" in schema and all("const" in alt for alt in schema["oneOf"]):
            alias = getattr(types, name, None)
            assert alias is not None, f"add Literal alias types.{name}"
            assert set(typing.get_args(alias)) == {alt["const"] for alt in schema["oneOf"]}, name


def test_action_variants_match_the_action_schema(openrpc: dict) -> None:
    named = schemas(openrpc)
    variants = {typing.get_args(typing.get_type_hints(cls)["kind"])[0]: cls for cls in typing.get_args(types.Action)}
    schema_kinds = {}
    for alt in named["Action"]["oneOf"]:
        properties, required = dict(alt["properties"]), set(alt.get("required", []))
        base = ref_name(alt)
        if base:  # `compacted` is the CompactionReport's fields plus `kind`
            properties.update(named[base]["properties"])
            required |= set(named[base].get("required", []))
        schema_kinds[alt["properties"]["kind"]["const"]] = {"properties": properties, "required": sorted(required)}
    assert set(variants) == set(schema_kinds), "Action variants differ from openrpc.json"
    for kind, schema in schema_kinds.items():
        check_typed_dict(variants[kind], schema, named)


@pytest.mark.parametrize("cls", [Client, AsyncClient])
def test_methods_cover_the_protocol_with_its_params(openrpc: dict, cls: type) -> None:
    """Each protocol method has a client method whose keyword arguments are its params."""
    served = {m["name"] for m in openrpc["methods"]}
    assert served == set(METHODS), (
        f"openrpc.json methods changed: add client methods for {sorted(served - set(METHODS))}, "
        f"remove {sorted(set(METHODS) - served)}"
    )
    named = schemas(openrpc)
    for method in openrpc["methods"]:
        fn = getattr(cls, METHODS[method["name"]])
        params = named[method["params"][0]["schema"]["title"]]
        signature = inspect.signature(fn)
        if method["name"] == "initialize":  # by keyword, passed through
            assert any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
            continue
        # LSP's camelCase params (`workDoneToken`) are snake_case keywords in Python.
        names = [CAMEL_CASE.get(p, p) for p in signature.parameters if p != "self"]
        assert set(names) == set(params.get("properties", {})), f"{cls.__name__}.{fn.__name__} params differ"
        required = [p.name for p in signature.parameters.values() if p.name != "self" and p.default is p.empty]
        assert set(required) == set(params.get("required", [])), f"{cls.__name__}.{fn.__name__} required differ"
        result_type = typing.get_type_hints(fn)["return"]
        assert result_type.__name__ == method["result"]["schema"]["title"]


def test_sync_and_async_clients_have_the_same_methods() -> None:
    public = lambda cls: {n for n in dir(cls) if not n.startswith("_")}  # noqa: E731
    assert public(Client) - {"close"} == public(AsyncClient) - {"aclose"}


def test_every_error_code_has_its_class(openrpc: dict) -> None:
    listed = openrpc["x-satchel-errors"]
    assert {e["code"] for e in listed} == set(errors.ERRORS), "error codes differ from x-satchel-errors"
    for entry in listed:
        cls = errors.ERRORS[entry["code"]]
        assert cls.__name__ == entry["name"]
        assert cls.code_for_class == entry["code"]
        assert issubclass(cls, satchel_client.SatchelError)
        assert getattr(satchel_client, entry["name"]) is cls, f"export {entry['name']} from satchel_client"


def test_error_mapping_from_a_response() -> None:
    err = errors.error_from_response({"code": -32001, "message": "unknown session", "data": {"x": 1}})
    assert isinstance(err, errors.UnknownSession)
    assert (err.code, err.message, err.data) == (-32001, "unknown session", {"x": 1})
    details = {"expected": 1, "session_messages": 2}
    stale = errors.error_from_response({"code": -32009, "message": "stale", "data": {"details": details}})
    assert type(stale) is errors.StaleSession and satchel_client.StaleSession is errors.StaleSession
    assert stale.data["details"]["session_messages"] == 2
    off = errors.error_from_response({"code": -32010, "message": "memory search is not available"})
    assert type(off) is errors.MemoryUnavailable and satchel_client.MemoryUnavailable is errors.MemoryUnavailable
    unknown = errors.error_from_response({"code": -31999, "message": "new"})
    assert type(unknown) is errors.SatchelError and unknown.code == -31999


def test_prepare_memory_shorthand() -> None:
    """``prepare(memory=True)`` sends ``memory: {}`` (the defaults); ``False`` and ``None`` send nothing."""
    from satchel_client import _protocol as P

    def params(memory):
        return P.prepare_params("s", [], None, None, None, None, None, memory=memory)

    assert params(True)["memory"] == {}
    assert params({"max_results": 2})["memory"] == {"max_results": 2}
    assert "memory" not in params(False) and "memory" not in params(None)


def test_types_are_plain_typed_dicts() -> None:
    """Results stay plain dicts: nothing converts them, so new daemon keys never break old clients."""
    result: types.ReadResult = {"path": "p", "content": "", "byte_offset": 0, "start_line": 1, "end_line": 1,
                                "eof": True, "total_lines": 0, "total_bytes": 0}  # fmt: skip
    assert type(result) is dict
