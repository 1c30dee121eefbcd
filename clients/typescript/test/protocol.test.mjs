// The package's types and errors against protocol/openrpc.json and protocol/errors.md, so a
// protocol change fails here until src/types.ts and src/errors.ts follow it.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { ACTION_FIELDS, ERROR_CLASSES, METHODS, SCHEMA_ENUMS, SCHEMA_FIELDS, SatchelError, errorFromResponse } from '../dist/index.js';
import * as exported from '../dist/index.js';
import { REPO_DIR } from './helpers.mjs';

const openrpc = JSON.parse(readFileSync(join(REPO_DIR, 'protocol/openrpc.json'), 'utf8'));

/**
 * Every titled or `$defs` schema in the document, by name (the same name always means the same
 * schema). Top-level descriptions are left out: a root schema's is its method's params or
 * result (e.g. `Calibration`, `context.usage`'s result and a field of `InspectResult`).
 */
function schemas() {
  const found = new Map();
  const visit = (name, schema) => {
    const seen = found.get(name);
    if (seen) assert.deepEqual(schema, seen, `two different schemas named ${name}`);
    found.set(name, schema);
  };
  const roots = openrpc.methods.flatMap((m) => [m.params[0].schema, m.result.schema]);
  roots.push(...openrpc['x-satchel-notifications'].map((n) => n.params).filter((p) => p?.$schema));
  for (const root of roots) {
    const { $defs = {}, $schema, title, description, ...body } = root;
    visit(title, body);
    for (const [name, { description: _, ...def }] of Object.entries($defs)) visit(name, def);
  }
  return found;
}

const fieldSpec = (schema) => {
  const required = new Set(schema.required ?? []);
  return Object.keys(schema.properties ?? {}).map((k) => (required.has(k) ? k : `${k}?`)).sort();
};
const ref = (r) => r.replace('#/$defs/', '');

test('METHODS are the methods of openrpc.json', () => {
  assert.deepEqual([...METHODS].sort(), openrpc.methods.map((m) => m.name).sort());
});

test('SCHEMA_FIELDS match every object schema (names and optionality)', () => {
  const objects = [...schemas()].filter(([, s]) => s.type === 'object');
  assert.deepEqual(Object.keys(SCHEMA_FIELDS).sort(), objects.map(([name]) => name).sort());
  for (const [name, schema] of objects) assert.deepEqual([...SCHEMA_FIELDS[name]].sort(), fieldSpec(schema), name);
});

test('ACTION_FIELDS match every variant of Action', () => {
  const all = schemas();
  const variants = all.get('Action').oneOf;
  assert.deepEqual(Object.keys(ACTION_FIELDS).sort(), variants.map((v) => v.properties.kind.const).sort());
  for (const variant of variants) {
    // `compacted` is `{kind}` plus the fields of the CompactionReport it refers to.
    const base = variant.$ref ? all.get(ref(variant.$ref)) : { properties: {}, required: [] };
    const merged = {
      properties: { ...base.properties, ...variant.properties },
      required: [...(base.required ?? []), ...(variant.required ?? [])],
    };
    assert.deepEqual([...ACTION_FIELDS[variant.properties.kind.const]].sort(), fieldSpec(merged), variant.properties.kind.const);
  }
});

test('SCHEMA_ENUMS match every string enum', () => {
  const enums = [...schemas()].filter(([, s]) => s.oneOf?.every((v) => v.type === 'string' && 'const' in v));
  assert.deepEqual(Object.keys(SCHEMA_ENUMS).sort(), enums.map(([name]) => name).sort());
  for (const [name, schema] of enums) assert.deepEqual([...SCHEMA_ENUMS[name]].sort(), schema.oneOf.map((v) => v.const).sort(), name);
});

test('every error code of openrpc.json and errors.md has its class', () => {
  const table = readFileSync(join(REPO_DIR, 'protocol/errors.md'), 'utf8')
    .split('\n')
    .map((line) => line.match(/^\| (-\d+) \| (\w+) \|/))
    .filter(Boolean)
    .map(([, code, name]) => ({ code: Number(code), name }));
  const documented = openrpc['x-satchel-errors'].map(({ code, name }) => ({ code, name }));
  assert.deepEqual(table, documented, 'errors.md and openrpc.json agree');
  assert.deepEqual(Object.keys(ERROR_CLASSES).map(Number).sort(), documented.map((e) => e.code).sort());
  for (const { code, name } of documented) {
    const Class = exported[name];
    assert.equal(ERROR_CLASSES[code], Class, `${name} is exported and registered for ${code}`);
    const error = errorFromResponse({ code, message: 'm', data: { name } });
    assert.ok(error instanceof Class && error instanceof SatchelError && error instanceof Error);
    assert.deepEqual([error.name, error.code, error.message, error.data], [name, code, 'm', { name }]);
  }
  const unknown = errorFromResponse({ code: -32099, message: 'other' });
  assert.equal(unknown.constructor, SatchelError);
  assert.equal(unknown.code, -32099);
});
