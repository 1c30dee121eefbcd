// The README example, run as written against the package installed the way a user installs it.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { PACKAGE_DIR, SATCHEL_BIN, tempDir } from './helpers.mjs';

test('the README example runs as written', () => {
  const readme = readFileSync(join(PACKAGE_DIR, 'README.md'), 'utf8');
  const example = readme.match(/```js\n(\/\/ example\.mjs[^]*?)```/)?.[1];
  assert.ok(example, 'README.md has a ```js block starting with `// example.mjs`');

  // A fresh project with the package installed from its folder (npm links it; dist/ is built).
  const project = tempDir('satchel-ts-project-');
  // npm's own variables (set when this runs under `npm test`) would point the install elsewhere.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.toLowerCase().startsWith('npm_')));
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'example', private: true }));
  execFileSync('npm', ['install', '--offline', '--ignore-scripts', '--no-audit', '--no-fund', PACKAGE_DIR], {
    cwd: project,
    env,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  writeFileSync(join(project, 'example.mjs'), example);

  const output = execFileSync(process.execPath, ['example.mjs'], {
    cwd: project,
    env: { ...env, SATCHEL_BIN, SATCHEL_LOG: 'warn' },
    encoding: 'utf8',
    timeout: 60_000,
  });
  assert.match(output, /^\d+ of 131072 tokens\n<<<TRUNCATED>>>\n/);
  assert.match(output, /contains 3001 lines in total/);
  assert.match(output, /tool_result\/[0-9a-f]+\.txt/);
  assert.match(output, /\(exit status, errors\) stays visible\.\n$/, 'the whole notice, up to the tail');
});
