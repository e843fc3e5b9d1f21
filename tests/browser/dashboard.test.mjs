// The dashboard in headless Chromium against a real local cluster.
//
// Starts `torus up examples/clusters/local.yaml` in a temporary TORUS_TEMP_DIR, runs a gang on a TPU-V6E 4x4 slice
// that reports a loss and prints lines per rank, logs in through the head's login URL (/?token=...), and checks:
// the overview's counts, the slice held by the run drawn with its four hosts (each labelled with its rank), the run
// page's loss curve, rank 2's log (and that follow mode brings new lines), the nodes table's filter, a node's page,
// the jobs list, the actors page (a named actor a Python driver created), the services page (a READY replica) and
// the autoscaler's page (a slice it launched for a reservation). Any console error, page error or failed request of
// the page fails the test. Screenshots go to
// TORUS_TEST_OUTPUT_DIR (default build/test-output/browser/).
//
//   node tests/browser/dashboard.test.mjs              the page as the head serves it (embedded web/)
//   node tests/browser/dashboard.test.mjs --serve-web  web/ from the source tree, API forwarded to the head
//
// Exit status: 0 passed, 1 failed, 77 skipped (no Chromium or no node_modules: run `npm ci --prefix tests/browser`).

import { spawn, execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, '..', '..');
const BIN_DIR = process.env.TORUS_BIN_DIR || path.join(REPO, 'build', 'bin');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const OUTPUT_DIR = process.env.TORUS_TEST_OUTPUT_DIR || path.join(REPO, 'build', 'test-output', 'browser');
const SERVE_WEB = process.argv.includes('--serve-web');
// --tls: the cluster runs with TLS (`torus up --tls`): the API is HTTPS, checked against the cluster CA, and Chromium
// trusts exactly the head's key (its SPKI hash).
const TLS = process.argv.includes('--tls');
const RUN_NAME = 'dash-e2e';
const SKIP = 77;

function log(...args) {
  console.log(`[browser] ${args.join(' ')}`);
}

function skip(why) {
  console.log(`SKIP: ${why}`);
  process.exit(SKIP);
}

if (!fs.existsSync(CHROMIUM)) skip(`no Chromium at ${CHROMIUM} (install Debian's chromium, or set CHROMIUM)`);
if (!fs.existsSync(path.join(HERE, 'node_modules', 'playwright-core'))) {
  skip('tests/browser/node_modules is missing; run `npm ci --prefix tests/browser` (scripts/setup.sh does)');
}
const { chromium } = await import('playwright-core');
const { serveWeb } = await import('./serve_web.mjs');

for (const b of ['torus', 'torus-head', 'torus-node']) {
  if (!fs.existsSync(path.join(BIN_DIR, b))) {
    console.error(`FAIL: ${path.join(BIN_DIR, b)} is missing; build torus or set TORUS_BIN_DIR`);
    process.exit(1);
  }
}

// Prints `rank R line N` every 0.2 s and reports a loss on every line, until stopped; it keeps the CPU busy for
// 30 ms of each line, so that the simulated libtpu reports its chips' duty cycle above 0.
const TRAIN_SCRIPT = `\
import sys, time
import torus_train
rank = torus_train.get_context().rank
for n in range(1, 100000):
    print(f"rank {rank} line {n}", flush=True)
    torus_train.report({"loss": 2.0 / n, "step": n})
    busy_until = time.monotonic() + 0.03
    while time.monotonic() < busy_until:
        pass
    time.sleep(0.2)
`;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'torus-browser-'));
const torusDir = path.join(tmp, 'torus');
fs.mkdirSync(torusDir);
fs.mkdirSync(OUTPUT_DIR, { recursive: true });
const env = { ...process.env, TORUS_TEMP_DIR: torusDir };
delete env.TORUS_ADDRESS;
delete env.TORUS_TOKEN;

function torus(...args) {
  return execFileSync(path.join(BIN_DIR, 'torus'), args, { env, encoding: 'utf8', timeout: 120000, stdio: ['ignore', 'pipe', 'pipe'] });
}

// fetch(), or with a CA a request over node:https that checks the server against it (fetch cannot be given a CA).
function httpFetch(url, options = {}, ca = null) {
  if (!ca) return fetch(url, options);
  return new Promise((resolve, reject) => {
    const req = https.request(url, { method: options.method || 'GET', headers: options.headers || {}, ca }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const body = Buffer.concat(chunks).toString('utf8');
        resolve({ ok: res.statusCode >= 200 && res.statusCode < 300, status: res.statusCode,
                  text: async () => body, json: async () => JSON.parse(body) });
      });
    });
    req.on('error', reject);
    if (options.body) req.write(options.body);
    req.end();
  });
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

async function waitFor(what, fn, timeoutMs = 60000, intervalMs = 250) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last: ${last instanceof Error ? last.message : JSON.stringify(last)}`);
    await sleep(intervalMs);
  }
}

function check(cond, message) {
  if (!cond) throw new Error(message);
}

let trainProc = null;
let actorProc = null;
let browser = null;
let proxy = null;
let currentPage = null;
const problems = [];

async function main() {
  log(`TORUS_TEMP_DIR=${torusDir}; screenshots in ${OUTPUT_DIR}`);
  // local.yaml, and a node type of v5p 2x2x2 slices that the autoscaler launches when one is reserved.
  const spec = path.join(tmp, 'cluster.yaml');
  fs.writeFileSync(spec, `${fs.readFileSync(path.join(REPO, 'examples', 'clusters', 'local.yaml'), 'utf8')}
node_types:
  - name: v5p
    tpu: {pod_type: v5p-16, topology: 2x2x2}
    max_slices: 1
    idle_timeout_s: 600
    capacity_classes: [{class: spot, provisioning_timeout_s: 60}]
`);
  torus('up', spec, '--port', '0', '--dashboard-port', '0', '--metrics-period-ms', '500', ...(TLS ? ['--tls'] : []));
  const session = path.join(torusDir, 'session_latest');
  const address = fs.readFileSync(path.join(session, 'dashboard_address'), 'utf8').trim();
  const token = fs.readFileSync(path.join(session, 'token'), 'utf8').trim();
  const ca = TLS ? fs.readFileSync(path.join(session, 'ca.crt')) : null;
  const scheme = TLS ? 'https' : 'http';
  if (TLS) check(SERVE_WEB === false, '--serve-web and --tls do not go together');
  const api = async (route) => {
    const res = await httpFetch(`${scheme}://${address}${route}`, { headers: { Authorization: `Bearer ${token}` } }, ca);
    if (!res.ok) throw new Error(`${route}: HTTP ${res.status} ${await res.text()}`);
    return res.json();
  };

  // The run starts on chips that have reported idle samples, as on a cluster that was up before it: each chip then
  // has an idle series beside the run's, and the page must show the current one.
  await waitFor('idle duty-cycle samples from every v6e host', async () => {
    const m = await api('/api/v0/metrics?name=torus_tpu_duty_cycle_percent&since=-2m&latest=true');
    const v6e = (m.series || []).filter((x) => (x.labels.slice || '').startsWith('v6e-'));
    const hosts = new Set(v6e.map((x) => x.labels.node_id));
    return hosts.size === 8;
  }, 60000);
  const script = path.join(tmp, 'dash_train.py');
  fs.writeFileSync(script, TRAIN_SCRIPT);
  const trainLog = fs.openSync(path.join(tmp, 'train.out'), 'w');
  trainProc = spawn(path.join(BIN_DIR, 'torus'), ['train', '--accelerator-type', 'TPU-V6E', '--topology', '4x4', '--name', RUN_NAME,
    '--storage-path', path.join(tmp, 'runs'), '--', '/usr/bin/python3', script], { env, stdio: ['ignore', trainLog, trainLog] });

  const run = await waitFor('the run to be RUNNING with 3 reported losses', async () => {
    const r = await api(`/api/v0/runs/${RUN_NAME}`);
    const a = r.attempts && r.attempts[r.attempts.length - 1];
    return r.status === 'RUNNING' && a && a.ranks.length === 4 && a.metrics.length >= 3 ? r : null;
  }, 90000);
  const ranks = run.attempts[run.attempts.length - 1].ranks;
  const sliceName = ranks[0].slice;
  const rank2Node = ranks.find((r) => r.rank === 2).node_id;
  log(`run ${run.run_id} on slice ${sliceName}; rank 2 on ${rank2Node}`);

  let base = `${scheme}://${address}`;
  if (SERVE_WEB) {
    proxy = await serveWeb({ head: address, token });
    base = `http://127.0.0.1:${proxy.port}`;
    log(`serving web/ from the source tree at ${base}`);
  } else {
    const res = await httpFetch(`${base}/static/app.js`, { headers: { Authorization: `Bearer ${token}` } }, ca);
    check(res.ok, `the head does not serve the dashboard (GET /static/app.js: HTTP ${res.status}); is AddDashboardRoutes wired?`);
  }

  const chromiumArgs = ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'];
  if (TLS) {
    // Trust the head's own key, nothing else: the SPKI hash of the certificate it serves.
    const headCert = new crypto.X509Certificate(fs.readFileSync(path.join(session, 'state', 'tls', 'head.crt')));
    const spki = headCert.publicKey.export({ type: 'spki', format: 'der' });
    chromiumArgs.push(`--ignore-certificate-errors-spki-list=${crypto.createHash('sha256').update(spki).digest('base64')}`);
  }
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: chromiumArgs });
  const context = await browser.newContext({ viewport: { width: 1440, height: 1000 } });
  const page = await context.newPage();
  currentPage = page;
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console error: ${m.text()} (${m.location().url || 'page'})`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => {
    // A poll cut short by leaving a view is not a failure of the page.
    if (!/ERR_ABORTED/.test(r.failure()?.errorText || '')) problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`);
  });
  const shot = async (name) => {
    const file = path.join(OUTPUT_DIR, `${name}.png`);
    await page.screenshot({ path: file, fullPage: true });
    log(`screenshot ${file}`);
  };
  const loaded = (view) => page.waitForSelector(`.page[data-view="${view}"][data-loaded="true"]`, { timeout: 15000 });

  // Login and the overview.
  await page.goto(`${base}/?token=${encodeURIComponent(token)}`);
  await loaded('overview');
  check(!page.url().includes(token), `the token stays in the address bar: ${page.url()}`);
  const alive = await page.textContent('[data-stat="nodes-alive"] .value');
  const cluster = await api('/api/v0/cluster');
  check(Number(alive) === cluster.nodes_alive, `overview shows ${alive} nodes alive; the API says ${cluster.nodes_alive}`);
  const chips = await page.textContent('[data-stat="chips-total"] .value');
  check(Number(chips) === cluster.resources_total.TPU, `overview shows ${chips} TPU chips; the API says ${cluster.resources_total.TPU}`);
  await shot('overview');

  // Slices: the reserved slice carries the run's name; its four hosts are the run's, each with its rank.
  await page.click('nav a[data-nav="slices"]');
  await loaded('slices');
  const card = page.locator(`.slice-card[data-run="${RUN_NAME}"]`);
  await card.waitFor({ timeout: 15000 });
  check(await card.getAttribute('data-slice') === sliceName, `the run's card is not slice ${sliceName}`);
  check(await card.getAttribute('data-state') === 'RESERVED', 'the run\'s slice is not drawn RESERVED');
  const hosts = card.locator('g.host[data-host]');
  check(await hosts.count() === 4, `slice ${sliceName} is drawn with ${await hosts.count()} hosts, not 4`);
  for (const r of ranks) {
    const host = card.locator(`g.host[data-host="${r.node_id}"]`);
    check(await host.count() === 1, `host ${r.node_id} is not drawn in slice ${sliceName}`);
    check(await host.getAttribute('data-run') === RUN_NAME, `host ${r.node_id} is not labelled with run ${RUN_NAME}`);
    check(await host.getAttribute('data-rank') === String(r.rank), `host ${r.node_id} is not labelled rank ${r.rank}`);
    check(await host.locator('rect.chip[data-state="busy"]').count() === r.chips.length, `host ${r.node_id}: not every chip is drawn busy`);
  }
  const tip = await card.locator(`g.host[data-host="${rank2Node}"] > title`).textContent();
  check(tip.includes(RUN_NAME) && tip.includes('rank 2'), `the hover text of ${rank2Node} does not name the run and rank 2: ${tip}`);
  await card.locator(`g.host[data-host="${rank2Node}"] rect.host-box`).hover();
  await page.selectOption('#slices-color', 'duty');
  await page.waitForSelector('#slices-legend .chip-nodata, #slices-legend .swatch');
  // Every chip of the run's hosts gets a duty cycle above 0 (its worker keeps a CPU busy) from the simulated libtpu
  // service, shown on hover.
  await page.waitForFunction((host) => {
    const chips = [...document.querySelectorAll(`g.host[data-host="${host}"] rect.chip`)];
    return chips.length === 4 && chips.every((c) => c.dataset.state !== 'nodata' && Number(c.dataset.duty) > 0);
  }, rank2Node, { timeout: 45000 });  // samples come every 5 s, later when the machine is loaded (tests beside it)
  // The hover text of a chip names its holder with the rank, its duty cycle and its HBM in use.
  await page.waitForFunction((host) => {
    const title = document.querySelector(`g.host[data-host="${host}"] rect.chip > title`);
    return title && /rank 2/.test(title.textContent) && /duty cycle [0-9.]+%/.test(title.textContent) &&
      /HBM used [0-9.]+ GiB/.test(title.textContent);
  }, rank2Node, { timeout: 15000 });
  await shot('slices-duty');
  await page.selectOption('#slices-color', 'state');
  await shot('slices');

  // The run: loss curve, workers, rank 2's log, and follow mode.
  await card.locator('a.run-link').click();
  await loaded('runs');
  check(await page.getAttribute('.page[data-view="runs"]', 'data-run') === RUN_NAME, 'the slice\'s run link did not open the run');
  await page.waitForSelector('#run-metric-chart svg g.series path', { timeout: 15000 });
  const d = await page.getAttribute('#run-metric-chart svg g.series path', 'd');
  check(d && d.split('L').length >= 3, `the loss curve has too few points: ${d}`);
  check(await page.locator('#workers-table tr[data-rank]').count() === 4, 'the run page does not list 4 workers');
  await page.click('#workers-table tr[data-rank="2"] button.open-log');
  const logSel = '#run-log[data-rank="2"]';
  await page.waitForFunction((sel) => /rank 2 line 3\n/.test(document.querySelector(sel)?.textContent || ''), logSel, { timeout: 15000 });
  const text = await page.textContent(logSel);
  check(!/rank [013] line/.test(text), 'rank 2\'s log shows another rank\'s lines');
  const lines = (text.match(/rank 2 line \d+/g) || []).length;
  check(await page.isChecked('#run-log-box .log-follow'), 'follow mode is off for a running run');
  await page.waitForFunction(([sel, n]) => ((document.querySelector(sel)?.textContent || '').match(/rank 2 line \d+/g) || []).length > n + 3,
    [logSel, lines], { timeout: 15000 });
  check(page.url().includes('rank=2'), `the run page's address does not keep the rank: ${page.url()}`);
  // Goodput: a summary and attempt 1's stacked bar, productive once the ranks report.
  await page.waitForFunction(() => {
    const bar = document.querySelector('#run-goodput .goodput-row[data-attempt="1"] .gp-productive');
    return bar && parseFloat(bar.style.width) > 0;
  }, null, { timeout: 15000 });
  check(/^goodput [0-9.]+%: productive/.test(await page.textContent('#goodput-summary')), 'the run page shows no goodput summary');
  await shot('run');

  // Nodes: the filter narrows the table to the slice's hosts; a node's page opens.
  await page.click('nav a[data-nav="nodes"]');
  await loaded('nodes');
  await page.fill('#nodes-filter', `tpu-slice-name=${sliceName}`);
  await page.waitForFunction(() => document.querySelectorAll('#nodes-table tr[data-node]').length === 4, null, { timeout: 10000 });
  await shot('nodes');
  await page.click(`#nodes-table tr[data-node="${rank2Node}"] a`);
  // The nodes view is loaded already (the list): wait for it to show the node.
  const opened = await page.waitForFunction((node) => document.querySelector('.page[data-view="nodes"]')?.getAttribute('data-node') === node,
    rank2Node, { timeout: 10000 }).then(() => true, () => false);
  check(opened, 'the node link did not open the node page');
  await loaded('nodes');
  await page.waitForSelector('#node-resources tr[data-resource="TPU"]');
  // Its charts draw the sampled series (CPU, duty cycle), and its log files include libtpu's.
  for (const chart of ['cpu', 'duty']) {
    await page.waitForSelector(`[data-chart="${chart}"] svg g.series path`, { timeout: 15000 });
  }
  // The node's libtpu log opens in the viewer: the simulated libtpu's lines naming the host's chips.
  const tpuFile = page.locator('#node-files-table tr[data-file^="tpu/"]').first();
  await tpuFile.waitFor({ timeout: 10000 });
  await tpuFile.locator('button.open-file').click();
  await page.waitForFunction(() => /Found 4 TPU v6e chip\(s\)/.test(document.querySelector('#node-log')?.textContent || ''),
    null, { timeout: 10000 });
  await shot('node');

  // Jobs: the list renders (empty or not).
  await page.click('nav a[data-nav="jobs"]');
  await loaded('jobs');
  await page.waitForSelector('#jobs-list table, #jobs-list .empty');
  // A job submitted now is shown by a refresh that the head's event stream caused, not by the poll.
  await page.evaluate(() => {
    window.changeRefreshes = 0;
    document.addEventListener('torus-refresh', (e) => { if (e.detail.cause === 'change') window.changeRefreshes += 1; });
  });
  const submitted = await httpFetch(`${scheme}://${address}/api/jobs/`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ entrypoint: 'sleep 1', submission_id: 'dash-event-job' }),
  }, ca);
  check(submitted.ok, `job submission: HTTP ${submitted.status}`);
  await page.waitForFunction(() => window.changeRefreshes > 0, null, { timeout: 15000 });
  await page.waitForSelector('#jobs-table tr[data-job="dash-event-job"]', { timeout: 15000 });
  // Its row follows the job to its end (another change the event stream brings).
  await page.waitForFunction(() => /SUCCEEDED/.test(document.querySelector('#jobs-table tr[data-job="dash-event-job"]')?.textContent || ''),
    null, { timeout: 20000 });

  // The actors page lists a named actor that a Python driver created, with its state and node.
  const actorScript = path.join(tmp, 'actor_driver.py');
  fs.writeFileSync(actorScript, [
    'import time, torus',
    'torus.init(namespace="dash")',
    '@torus.remote',
    'class Dash:',
    '    def ping(self):',
    '        return 1',
    'd = Dash.options(name="dash-actor").remote()',
    'torus.get(d.ping.remote())',
    'print("ready", flush=True)',
    'time.sleep(600)',
  ].join('\n') + '\n');
  // The source tree's package and the build's module first; what the test run was given after them.
  const pythonPath = [path.join(REPO, 'python'), path.join(path.dirname(BIN_DIR), 'python'),
    ...(process.env.PYTHONPATH || '').split(':').filter(Boolean)].join(':');
  actorProc = spawn('/usr/bin/python3', [actorScript], { env: { ...env, PYTHONPATH: pythonPath }, stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise((resolve, reject) => {
    actorProc.stdout.on('data', (d) => { if (/ready/.test(String(d))) resolve(); });
    actorProc.on('exit', (code) => reject(new Error(`the actor driver exited with ${code}`)));
  });
  await page.click('nav a[data-nav="actors"]');
  await loaded('actors');
  await page.waitForFunction(() => [...document.querySelectorAll('#actors-table tr[data-state="ALIVE"]')]
    .some((tr) => /dash\/dash-actor/.test(tr.textContent) && /__main__\.Dash/.test(tr.textContent) &&
      /owner/.test(tr.textContent) &&
      tr.querySelector('a[href^="#/nodes/"]') !== null),
  null, { timeout: 30000 });
  await page.screenshot({ path: path.join(OUTPUT_DIR, 'actors.png'), fullPage: true });

  // The autoscaler's page: a reservation of a shape the cluster lacks launches a v5p slice.
  torus('slice', 'reserve', '--accelerator-type', 'TPU-V5P', '--topology', '2x2x2', '--name', 'dash-scaled', '--wait', '60');
  await page.click('nav a[data-nav="autoscaler"]');
  await loaded('autoscaler');
  await page.waitForFunction(() => {
    const row = document.querySelector('#autoscaler-slices tr[data-phase="RUNNING"]');
    return row && /^v5p-[0-9a-f]{5}/.test(row.textContent) && /spot/.test(row.textContent) &&
      document.querySelector('#autoscaler-events tr[data-kind="launch"]') !== null &&
      /v5p-16 2x2x2|TPU-V5P 2x2x2/.test(document.querySelector('#autoscaler-types')?.textContent || '');
  }, null, { timeout: 30000 });
  await page.screenshot({ path: path.join(OUTPUT_DIR, 'autoscaler.png'), fullPage: true });

  // The services page: a service of one small replica, READY behind the ingress.
  const serviceSpec = path.join(tmp, 'echo.yaml');
  fs.writeFileSync(serviceSpec, `name: dash-echo
entrypoint: [/usr/bin/python3, ${path.join(REPO, 'tests', 'integration', 'serve', 'echo_server.py')}]
replica: {num_workers: 1, resources_per_worker: {CPU: 1}, label_selector: {team: data}}
health_check_period_s: 0.5
`);
  torus('serve', 'deploy', serviceSpec, '--wait', '--timeout-s', '60');
  await page.click('nav a[data-nav="services"]');
  await loaded('services');
  await page.waitForFunction(() => {
    const service = document.querySelector('#services .service[data-service="dash-echo"][data-status="RUNNING"]');
    return service && service.querySelector('tr[data-state="READY"] a[href^="#/runs/"]') !== null &&
      /1\/1 READY/.test(service.textContent) && /READY at /.test(service.textContent);
  }, null, { timeout: 30000 });
  await page.screenshot({ path: path.join(OUTPUT_DIR, 'services.png'), fullPage: true });

  // The overview again, to let a few polls run across views.
  await page.click('nav a[data-nav="overview"]');
  await loaded('overview');
  await page.waitForTimeout(2500);
  check(problems.length === 0, `the page reported problems:\n  ${problems.join('\n  ')}`);
}

async function cleanup() {
  try {
    if (browser) await browser.close();
  } catch (e) { /* already gone */ }
  if (proxy) await proxy.close();
  if (trainProc && trainProc.exitCode === null) trainProc.kill('SIGTERM');
  if (actorProc && actorProc.exitCode === null) actorProc.kill('SIGKILL');
  try {
    torus('down');
  } catch (e) {
    log(`torus down: ${e.message}`);
  }
  if (!process.env.TORUS_KEEP_TEMP) fs.rmSync(tmp, { recursive: true, force: true });
}

let failed = false;
try {
  await main();
  log('PASS');
} catch (e) {
  failed = true;
  console.error(`FAIL: ${e.message}`);
  if (currentPage) {
    const file = path.join(OUTPUT_DIR, 'failure.png');
    await currentPage.screenshot({ path: file, fullPage: true }).then(() => console.error(`screenshot ${file}`), () => {});
  }
  if (problems.length) console.error(`page problems:\n  ${problems.join('\n  ')}`);
  const out = path.join(tmp, 'train.out');
  if (fs.existsSync(out)) console.error(`torus train output (tail):\n${fs.readFileSync(out, 'utf8').slice(-2000)}`);
} finally {
  await cleanup();
}
process.exit(failed ? 1 : 0);
