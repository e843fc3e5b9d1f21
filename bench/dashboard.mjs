// The dashboard page at 1,000 nodes, in headless Chromium.
//
// Starts `bench_metrics --nodes 1000 --seconds 5 --hold-s 300` (1,000 synthetic TPU v6e hosts of 4 chips in 250
// 4-host slices, heartbeating and reporting metrics every 5 s, with an hour of metrics history), waits for the
// `dashboard: <login URL>` line it prints, logs in, and measures each view:
//
//   render     time from changing the address (#/...) until the view's content is in the DOM and a frame is drawn
//              (median and max of --navigations navigations; each one mounts the view afresh)
//   refresh    wall time of one live refresh (the page polls every 2 s; the page fires a `torus-refresh` event with
//              it), median and max over --polls polls while the view stays open
//   main/poll  main-thread busy time per poll (CDP Performance.getMetrics TaskDuration over the same polls)
//   long tasks tasks over 50 ms during those polls (count, longest)
//   DOM added  elements the page inserted per poll (a MutationObserver on the view)
//   elements   elements in the document once rendered
//   heap       JS heap used after a forced garbage collection (CDP)
//
// Any console error, page error or failed request fails the run. The bench process is stopped by its pid at the end.
//
//   node bench/dashboard.mjs                            starts build/bin/bench_metrics (about 1.5 min before it holds)
//   node bench/dashboard.mjs --url 'http://127.0.0.1:PORT/?token=T'   measures a head that is already running
//   node bench/dashboard.mjs --serve-web ...            the page from web/ instead of the head's embedded copy
//   options: --nodes N (1000), --hold-s S (300), --polls N (5), --navigations N (3), --node ID (bench-5),
//            --screenshots DIR, --accept-encoding gzip (what the browser asks the head to compress with; by default
//            Chromium's own, which includes br)
//
// Exit status: 0 done, 1 failed, 77 skipped (no Chromium or no tests/browser/node_modules).

import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, '..');
const BIN_DIR = process.env.TORUS_BIN_DIR || path.join(REPO, 'build', 'bin');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const BROWSER_DIR = path.join(REPO, 'tests', 'browser');

function option(name, fallback) {
  const i = process.argv.indexOf(name);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}
const URL_ARG = option('--url', null);
const NODES = Number(option('--nodes', '1000'));
const HOLD_S = Number(option('--hold-s', '300'));
const POLLS = Number(option('--polls', '5'));
const NAVIGATIONS = Number(option('--navigations', '3'));
const NODE_ID = option('--node', 'bench-5');
const SCREENSHOTS = option('--screenshots', null);
const SERVE_WEB = process.argv.includes('--serve-web');
const ACCEPT_ENCODING = option('--accept-encoding', null);
const POLL_MS = 2000;

function log(...args) {
  console.error(`[dashboard] ${args.join(' ')}`);
}

if (!fs.existsSync(CHROMIUM)) {
  console.log(`SKIP: no Chromium at ${CHROMIUM} (install Debian's chromium, or set CHROMIUM)`);
  process.exit(77);
}
if (!fs.existsSync(path.join(BROWSER_DIR, 'node_modules', 'playwright-core'))) {
  console.log('SKIP: tests/browser/node_modules is missing; run `npm ci --prefix tests/browser`');
  process.exit(77);
}
const require = createRequire(path.join(BROWSER_DIR, 'package.json'));
const { chromium } = require('playwright-core');

let bench = null;
let benchExited = null;
let browser = null;
let proxy = null;

// Starts bench_metrics and resolves to the login URL it prints once it holds.
function startBench() {
  const bin = path.join(BIN_DIR, 'bench_metrics');
  if (!fs.existsSync(bin)) throw new Error(`${bin} is missing; build the bench_metrics target or pass --url`);
  const args = ['--nodes', String(NODES), '--seconds', '5', '--hold-s', String(HOLD_S)];
  log(`starting ${bin} ${args.join(' ')}`);
  bench = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  benchExited = new Promise((resolve) => bench.on('exit', (code, signal) => resolve({ code, signal })));
  readline.createInterface({ input: bench.stderr }).on('line', (line) => console.error(`[bench_metrics] ${line}`));
  const out = readline.createInterface({ input: bench.stdout });
  return new Promise((resolve, reject) => {
    out.on('line', (line) => {
      const m = /^dashboard: (\S+)/.exec(line);
      if (m) resolve(m[1]);
    });
    benchExited.then(({ code, signal }) => reject(new Error(`bench_metrics exited (${signal || code}) before it printed the dashboard address`)));
  });
}

async function stopBench() {
  if (!bench || bench.exitCode !== null || bench.signalCode !== null) return;
  log(`stopping bench_metrics (pid ${bench.pid})`);
  process.kill(bench.pid, 'SIGTERM');
  const done = await Promise.race([benchExited, new Promise((r) => setTimeout(() => r(null), 60000))]);
  if (!done) {
    log(`bench_metrics (pid ${bench.pid}) did not stop; killing it`);
    process.kill(bench.pid, 'SIGKILL');
  }
}

function median(xs) {
  if (xs.length === 0) return NaN;
  const s = xs.slice().sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

const fmt = (v, digits = 0) => (Number.isFinite(v) ? v.toFixed(digits) : '–');

// In the page, before any script: collect long tasks and refresh timings, and count inserted elements.
function instrument() {
  window.__bench = { longTasks: [], refreshes: [], added: 0 };
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) window.__bench.longTasks.push({ start: e.startTime, ms: e.duration });
  }).observe({ type: 'longtask', buffered: true });
  document.addEventListener('torus-refresh', (e) => window.__bench.refreshes.push({ at: performance.now(), ...e.detail }));
  const watch = () => {
    const view = document.getElementById('view');
    if (!view) return false;
    new MutationObserver((records) => {
      for (const r of records) {
        for (const n of r.addedNodes) {
          if (n.nodeType === 1) window.__bench.added += 1 + n.getElementsByTagName('*').length;
        }
      }
    }).observe(view, { childList: true, subtree: true });
    return true;
  };
  if (!watch()) document.addEventListener('DOMContentLoaded', watch);
}

// In the page: change the address to `hash` and resolve to the ms until `done()` holds and the next frame is drawn.
async function navigateTimed({ hash, selector, minCount }) {
  const t0 = performance.now();
  window.location.hash = hash;
  await new Promise((resolve, reject) => {
    const check = () => {
      if (document.querySelectorAll(selector).length >= minCount) return resolve();
      if (performance.now() - t0 > 60000) return reject(new Error(`timed out waiting for ${minCount} x ${selector}`));
      requestAnimationFrame(check);
    };
    check();
  });
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  return performance.now() - t0;
}

// In the page: run `action` (an input or click), resolve to the ms until `selector` matches `minCount` times (and
// `text`, if given, is in the first match) and a frame is drawn.
async function actionTimed({ action, target, value, selector, minCount, maxCount, text }) {
  const t0 = performance.now();
  const el = document.querySelector(target);
  if (action === 'input') {
    el.value = value;
    el.dispatchEvent(new Event('input', { bubbles: true }));
  } else {
    el.click();
  }
  await new Promise((resolve, reject) => {
    const check = () => {
      const found = document.querySelectorAll(selector);
      if (found.length >= minCount && found.length <= maxCount && (!text || found[0].textContent.includes(text))) return resolve();
      if (performance.now() - t0 > 60000) return reject(new Error(`timed out waiting for ${selector}`));
      requestAnimationFrame(check);
    };
    check();
  });
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  return performance.now() - t0;
}

async function main() {
  let url = URL_ARG;
  if (!url) url = await startBench();
  log(`dashboard at ${url.replace(/token=[^&]*/, 'token=…')}`);
  const login = new URL(url);
  let base = login.origin;
  if (SERVE_WEB) {
    const { serveWeb } = await import(path.join(BROWSER_DIR, 'serve_web.mjs'));
    proxy = await serveWeb({ head: login.host, token: login.searchParams.get('token') });
    base = `http://127.0.0.1:${proxy.port}`;
    log(`serving web/ from the source tree at ${base}`);
  }

  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--enable-precise-memory-info'] });
  const context = await browser.newContext({ viewport: { width: 1440, height: 1000 } });
  const page = await context.newPage();
  currentPage = page;
  const problems = [];
  let agentErrors = 0;
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    // The synthetic hosts have no agent, so the head cannot list a node's log files (502); the page says so.
    if (/status of 502/.test(m.text()) && /\/api\/v0\/nodes\/[^/]+\/logs$/.test(m.location().url || '')) {
      agentErrors += 1;
      return;
    }
    problems.push(`console error: ${m.text()} (${m.location().url || 'page'})`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => {
    if (!/ERR_ABORTED/.test(r.failure()?.errorText || '')) problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`);
  });
  const checkProblems = () => {
    if (problems.length) throw new Error(`the page reported problems:\n  ${problems.join('\n  ')}`);
  };
  await page.addInitScript(instrument);
  const cdp = await context.newCDPSession(page);
  await cdp.send('Performance.enable', { timeDomain: 'timeTicks' });
  if (ACCEPT_ENCODING) {
    await cdp.send('Network.enable');
    await cdp.send('Network.setExtraHTTPHeaders', { headers: { 'Accept-Encoding': ACCEPT_ENCODING } });
  }
  const encodings = new Map();
  page.on('response', async (r) => {
    if (!r.url().includes('/api/')) return;
    const e = (await r.allHeaders())['content-encoding'] || 'identity';
    encodings.set(e, (encodings.get(e) || 0) + 1);
  });
  const metrics = async () => Object.fromEntries((await cdp.send('Performance.getMetrics')).metrics.map((m) => [m.name, m.value]));

  await page.goto(`${base}/?token=${encodeURIComponent(login.searchParams.get('token') || '')}`);
  await page.waitForSelector('.page[data-view="overview"][data-loaded="true"]', { timeout: 60000 });
  const apiNodes = await page.evaluate(async () => (await (await fetch('/api/v0/cluster', { credentials: 'same-origin' })).json()).nodes.length);
  log(`logged in; the cluster has ${apiNodes} nodes`);

  const views = [
    { name: 'overview', hash: '#/', selector: '.page[data-view="overview"][data-loaded="true"] [data-stat="nodes-alive"]', minCount: 1 },
    { name: 'slices', hash: '#/slices', selector: '.page[data-view="slices"][data-loaded="true"] .slice-card svg g.host', minCount: NODES },
    { name: 'slices, duty cycle', hash: '#/slices?color=duty', selector: '.page[data-view="slices"][data-loaded="true"] rect.chip[data-duty]', minCount: NODES * 4 },
    { name: 'nodes', hash: '#/nodes', selector: '.page[data-view="nodes"][data-loaded="true"] #nodes-table tr[data-node]', minCount: Math.min(50, NODES) },
    { name: `node ${NODE_ID}`, hash: `#/nodes/${NODE_ID}`, selector: `.page[data-view="nodes"][data-loaded="true"] #node-charts [data-chart] svg g.series path`, minCount: 5 },
  ];
  const rows = [];
  for (const v of views) {
    const renders = [];
    for (let i = 0; i < NAVIGATIONS; i++) {
      await page.evaluate(() => { window.location.hash = '#/blank'; });
      await page.waitForSelector('#view p.empty');
      await page.waitForTimeout(300);
      renders.push(await page.evaluate(navigateTimed, v));
    }
    checkProblems();
    if (SCREENSHOTS) {
      fs.mkdirSync(SCREENSHOTS, { recursive: true });
      await page.screenshot({ path: path.join(SCREENSHOTS, `${v.name.replace(/[^a-z0-9]+/gi, '_')}.png`), fullPage: false });
    }
    // The view stays open: measure its polls.
    await page.waitForTimeout(500);
    await page.evaluate(() => { window.__bench.longTasks = []; window.__bench.refreshes = []; window.__bench.added = 0; });
    const m0 = await metrics();
    const t0 = Date.now();
    await page.waitForTimeout(POLLS * POLL_MS + 200);
    const m1 = await metrics();
    const wall = Date.now() - t0;
    const seen = await page.evaluate(() => ({ ...window.__bench, elements: document.getElementsByTagName('*').length }));
    await cdp.send('HeapProfiler.collectGarbage');
    const heap = (await metrics()).JSHeapUsedSize;
    const polls = Math.max(1, seen.refreshes.length);
    const refreshMs = seen.refreshes.map((r) => r.ms);
    const row = {
      view: v.name,
      renderMedian: median(renders),
      renderMax: Math.max(...renders),
      refreshMedian: median(refreshMs),
      refreshMax: refreshMs.length ? Math.max(...refreshMs) : NaN,
      polls: seen.refreshes.length,
      mainPerPoll: (1000 * (m1.TaskDuration - m0.TaskDuration)) / polls,
      mainShare: (100 * 1000 * (m1.TaskDuration - m0.TaskDuration)) / wall,
      longTasks: seen.longTasks.length,
      longestTask: seen.longTasks.reduce((a, t) => Math.max(a, t.ms), 0),
      addedPerPoll: seen.added / polls,
      elements: seen.elements,
      heapMb: heap / (1024 * 1024),
    };
    rows.push(row);
    log(`${v.name}: render ${renders.map((x) => x.toFixed(0)).join(', ')} ms; ${seen.refreshes.length} refreshes ${refreshMs.map((x) => x.toFixed(0)).join(', ')} ms`);

    // The nodes table: a filter, then the next page.
    if (v.name === 'nodes') {
      const extra = [];
      await page.waitForTimeout(300);
      extra.push(['nodes: filter to one slice', await page.evaluate(actionTimed, { action: 'input', target: '#nodes-filter',
        value: 'tpu-slice-name=slice-42', selector: '#nodes-table tr[data-node]', minCount: 4, maxCount: 4 })]);
      await page.waitForTimeout(300);
      extra.push(['nodes: clear the filter', await page.evaluate(actionTimed, { action: 'input', target: '#nodes-filter',
        value: '', selector: '#nodes-table tr[data-node]', minCount: Math.min(50, NODES), maxCount: 50 })]);
      await page.waitForTimeout(300);
      extra.push(['nodes: next page', await page.evaluate(actionTimed, { action: 'click', target: '#nodes-next',
        selector: '#nodes-page', minCount: 1, maxCount: 1, text: 'page 2 of' })]);
      for (const [name, ms] of extra) rows.push({ view: name, renderMedian: ms, renderMax: ms });
    }
    // The slices filter narrows 250 cards to one.
    if (v.name === 'slices') {
      await page.waitForTimeout(300);
      const ms = await page.evaluate(actionTimed, { action: 'input', target: '#slices-filter', value: 'slice-42',
        selector: '.slice-card', minCount: 1, maxCount: 1 });
      rows.push({ view: 'slices: filter to one', renderMedian: ms, renderMax: ms });
      await page.evaluate(actionTimed, { action: 'input', target: '#slices-filter', value: '', selector: '.slice-card svg',
        minCount: NODES / 4, maxCount: 1e9 });
    }
    checkProblems();
  }

  const headers = ['view', 'render ms (median / max)', 'refresh ms (median / max)', 'main thread ms / poll (% busy)',
    'long tasks (longest ms)', 'elements added / poll', 'elements', 'JS heap MB'];
  const lines = [headers, headers.map((x, i) => (i === 0 ? '---' : '---:'))];
  for (const r of rows) {
    if (r.polls === undefined) {
      lines.push([r.view, fmt(r.renderMedian), '', '', '', '', '', '']);
      continue;
    }
    lines.push([r.view, `${fmt(r.renderMedian)} / ${fmt(r.renderMax)}`, `${fmt(r.refreshMedian)} / ${fmt(r.refreshMax)}`,
      `${fmt(r.mainPerPoll)} (${fmt(r.mainShare, 1)}%)`, `${r.longTasks} (${fmt(r.longestTask)})`, fmt(r.addedPerPoll),
      String(r.elements), fmt(r.heapMb, 1)]);
  }
  console.log(`dashboard with ${apiNodes} nodes; ${NAVIGATIONS} navigations per view, then ${POLLS} polls of ${POLL_MS} ms`);
  for (const l of lines) console.log(`| ${l.join(' | ')} |`);
  console.log(`API replies by content encoding: ${[...encodings].map(([e, n]) => `${e} ${n}`).join(', ')}`);
  if (agentErrors) console.log(`${agentErrors} log-file list requests answered 502 (the synthetic hosts have no agent)`);
  checkProblems();
}

let currentPage = null;
let failed = false;
const onSignal = async () => {
  await stopBench();
  process.exit(1);
};
process.on('SIGINT', onSignal);
process.on('SIGTERM', onSignal);
try {
  await main();
} catch (e) {
  failed = true;
  console.error(`FAIL: ${e.message}`);
  if (currentPage) {
    const state = await currentPage.evaluate(() => ({ address: window.location.href.replace(/token=[^&]*/, 'token=…'),
      error: document.getElementById('view-error')?.textContent || '', banner: document.getElementById('banner')?.textContent || '' }))
      .catch(() => null);
    if (state) console.error(`the page at ${state.address}: error box '${state.error}', banner '${state.banner}'`);
  }
} finally {
  try {
    if (browser) await browser.close();
  } catch (e) { /* already gone */ }
  if (proxy) await proxy.close();
  await stopBench();
}
process.exit(failed ? 1 : 0);
