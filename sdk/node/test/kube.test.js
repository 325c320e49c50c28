import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApiError, Kube } from '../dist/kube.js';

test('a credential refresh that fails is an ApiError of status 0, which callers retry, never an exit', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'sextant-kube-'));
  const kubeconfig = join(dir, 'config');
  writeFileSync(kubeconfig, JSON.stringify({
    apiVersion: 'v1', kind: 'Config', 'current-context': 'c',
    clusters: [{ name: 'k', cluster: { server: 'https://127.0.0.1:1' } }],
    contexts: [{ name: 'c', context: { cluster: 'k', user: 'u' } }],
    users: [{ name: 'u', user: { exec: { apiVersion: 'client.authentication.k8s.io/v1', command: 'false',
                                           interactiveMode: 'Never' } } }],
  }));
  const kube = Kube.load({ kubeconfig });
  await assert.rejects(kube.request('GET', '/api/v1/namespaces'), (err) => {
    assert.ok(err instanceof ApiError, `not an ApiError: ${err}`);
    assert.equal(err.status, 0);
    assert.match(err.message, /^GET \/api\/v1\/namespaces: no credentials: /);
    return true;
  });
});
