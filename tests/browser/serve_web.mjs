// Serves web/ straight from the source tree and forwards /api/ to a head with the cluster token, so the page can be
// tried (and the browser test run with --serve-web) without rebuilding torus-head after each edit.
//
//   node tests/browser/serve_web.mjs --head 127.0.0.1:8265 --token-file /tmp/torus/session_latest/token [--port 0]
//
// The embedded copy in torus-head serves the same files at the same paths (/ and /static/<file>).

import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const WEB_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'web');
const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml', '.json': 'application/json' };
const PAGE_POLICY = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
  "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

// Starts the server; resolves to {port, close()}.
export function serveWeb({ head, token, port = 0, host = '127.0.0.1' }) {
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    if (url.pathname.startsWith('/api/') || url.pathname === '/metrics') {
      const upstream = http.request({ host: head.split(':')[0], port: Number(head.split(':')[1]), path: req.url, method: req.method,
        headers: { ...req.headers, host: head, authorization: `Bearer ${token}` } }, (up) => {
        res.writeHead(up.statusCode, up.headers);
        up.pipe(res);
      });
      upstream.on('error', (e) => {
        res.writeHead(502, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: `head unreachable: ${e.message}` }));
      });
      req.pipe(upstream);
      return;
    }
    let name = null;
    if (url.pathname === '/') name = 'index.html';
    else if (url.pathname.startsWith('/static/')) name = url.pathname.slice('/static/'.length);
    if (!name || name.includes('/') || name.startsWith('.')) {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('not found\n');
      return;
    }
    fs.readFile(path.join(WEB_DIR, name), (err, data) => {
      if (err) {
        res.writeHead(404, { 'content-type': 'text/plain' });
        res.end('not found\n');
        return;
      }
      const headers = { 'content-type': TYPES[path.extname(name)] || 'application/octet-stream', 'cache-control': 'no-cache' };
      // The policy the head sends with the page (dashboard_http.cc), so that a violation shows here too.
      if (name.endsWith('.html')) headers['content-security-policy'] = PAGE_POLICY;
      res.writeHead(200, headers);
      res.end(data);
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve({ port: server.address().port, close: () => new Promise((r) => server.close(r)) }));
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const opt = (name, fallback) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : fallback;
  };
  const head = opt('--head');
  const tokenFile = opt('--token-file');
  if (!head || !tokenFile) {
    console.error('usage: serve_web.mjs --head HOST:PORT --token-file FILE [--port N]');
    process.exit(2);
  }
  const token = fs.readFileSync(tokenFile, 'utf8').trim();
  const { port } = await serveWeb({ head, token, port: Number(opt('--port', '0')) });
  console.log(`dashboard from ${WEB_DIR} at http://127.0.0.1:${port}/ (API of ${head})`);
}
