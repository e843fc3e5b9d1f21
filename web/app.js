// The dashboard: hash routes, one view mounted at a time, refreshed by polling while the tab is visible.
//
//   #/                    overview          #/runs/<id>[?rank=R]   one gang run and its rank logs
//   #/slices              slice topologies  #/jobs, #/jobs/<id>    Ray jobs and their logs
//   #/runs                gang runs         #/nodes[?filter=..&state=..&page=..], #/nodes/<id>[?file=..]
//   #/actors              actors            #/autoscaler           the autoscaler's slices and failures
//   #/services            services, their replicas and events

import { h, setChildren } from './dom.js';
import { onConnectionState, ApiError } from './api.js';
import { overviewView } from './view_overview.js';
import { slicesView } from './view_slices.js';
import { runsView, runView } from './view_runs.js';
import { jobsView, jobView } from './view_jobs.js';
import { nodesView, nodeView } from './view_nodes.js';
import { actorsView } from './view_actors.js';
import { autoscalerView } from './view_autoscaler.js';
import { servicesView } from './view_services.js';

const POLL_MS = 2000;

const routes = [
  { name: 'overview', match: (p) => p.length === 0 || (p.length === 1 && p[0] === 'overview'), view: overviewView },
  { name: 'slices', match: (p) => p.length === 1 && p[0] === 'slices', view: slicesView },
  { name: 'runs', match: (p) => p.length === 1 && p[0] === 'runs', view: runsView },
  { name: 'runs', match: (p) => p.length === 2 && p[0] === 'runs', view: runView },
  { name: 'jobs', match: (p) => p.length === 1 && p[0] === 'jobs', view: jobsView },
  { name: 'jobs', match: (p) => p.length === 2 && p[0] === 'jobs', view: jobView },
  { name: 'nodes', match: (p) => p.length === 1 && p[0] === 'nodes', view: nodesView },
  { name: 'actors', match: (p) => p.length === 1 && p[0] === 'actors', view: actorsView },
  { name: 'autoscaler', match: (p) => p.length === 1 && p[0] === 'autoscaler', view: autoscalerView },
  { name: 'services', match: (p) => p.length === 1 && p[0] === 'services', view: servicesView },
  { name: 'nodes', match: (p) => p.length === 2 && p[0] === 'nodes', view: nodeView },
];

// "#/runs/run-1?rank=2" → {parts: ['runs', 'run-1'], query: URLSearchParams('rank=2')}.
export function parseHash(hash) {
  const text = (hash || '').replace(/^#\/?/, '');
  const [path, query] = text.split('?', 2);
  const parts = path.split('/').filter((x) => x !== '').map((x) => {
    try {
      return decodeURIComponent(x);
    } catch (e) {
      return x;
    }
  });
  return { parts, query: new URLSearchParams(query || '') };
}

const main = document.getElementById('view');
const errorBox = document.getElementById('view-error');
const banner = document.getElementById('banner');
let current = null; // {controller, token}
let inFlight = false;
let again = null; // the cause of a refresh asked for while one was in flight
let mountCount = 0;

function showError(e) {
  if (!e) {
    errorBox.hidden = true;
    errorBox.replaceChildren();
    return;
  }
  // 401 and an unreachable head are shown by the banner instead.
  if (e instanceof ApiError && (e.status === 401 || e.status === 0)) return;
  errorBox.hidden = false;
  setChildren(errorBox, e.message || String(e));
}

onConnectionState((state) => {
  document.body.dataset.connection = state;
  if (state === 'ok') {
    banner.hidden = true;
    return;
  }
  banner.hidden = false;
  if (state === 'unauthorized') {
    setChildren(banner, 'Not logged in. Open ',
      h('code', {}, `${window.location.origin}/?token=<cluster token>`),
      ' (the token is in the session directory, e.g. /tmp/torus/session_latest/token).');
  } else {
    setChildren(banner, 'The head is not answering; retrying every few seconds.');
  }
});

async function refresh(cause = 'poll') {
  if (!current) return;
  if (inFlight) {
    if (cause === 'change') again = cause;
    return;
  }
  const mine = current;
  const start = performance.now();
  inFlight = true;
  try {
    await mine.controller.refresh();
    if (current === mine) {
      showError(null);
      mine.root.dataset.loaded = 'true';
    }
  } catch (e) {
    if (current === mine) showError(e);
  } finally {
    inFlight = false;
  }
  // How long the refresh took, fetches and drawing together, and why it ran: 'poll', or 'change' (bench/dashboard.mjs
  // and the browser test listen for it).
  if (current === mine) {
    document.dispatchEvent(new CustomEvent('torus-refresh', { detail: { view: mine.root.dataset.view, ms: performance.now() - start, cause } }));
  }
  if (again !== null) {
    const next = again;
    again = null;
    refresh(next);
  }
}

// A change of state on the head (a node joining or dying, a group placed, a job or run changing status) refreshes
// the view at once, from the head's event stream; samples and logs come with the poll. The browser reconnects the
// stream by itself after the head was away.
function watchChanges() {
  if (typeof EventSource === 'undefined') return;
  const source = new EventSource('/api/v0/events?watch=1&kind=node,group,job,run');
  let timer = null;
  const changed = (message) => {
    let event = null;
    try {
      event = JSON.parse(message.data);
    } catch {
      return;
    }
    if (!event.status || timer !== null) return; // reports and stop requests change no status
    timer = setTimeout(() => {
      timer = null;
      if (document.visibilityState === 'visible') refresh('change');
    }, 50);
  };
  for (const kind of ['node', 'group', 'job', 'run']) source.addEventListener(kind, changed);
}

function mount() {
  const route = parseHash(window.location.hash);
  const entry = routes.find((r) => r.match(route.parts));
  if (current && current.controller.unmount) current.controller.unmount();
  current = null;
  inFlight = false;
  showError(null);
  main.replaceChildren();
  for (const a of document.querySelectorAll('nav a[data-nav]')) {
    a.classList.toggle('active', entry !== undefined && a.dataset.nav === entry.name);
  }
  if (!entry) {
    main.append(h('p', { class: 'empty' }, 'No such page. ', h('a', { href: '#/' }, 'Back to the overview.')));
    return;
  }
  mountCount += 1;
  const root = h('div', { class: 'page', dataset: { view: entry.name, mount: mountCount } });
  main.append(root);
  current = { root, controller: entry.view(root, route) };
  document.body.dataset.view = entry.name;
  refresh();
}

window.addEventListener('hashchange', mount);
document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'visible') refresh();
});
setInterval(() => {
  if (document.visibilityState === 'visible') refresh();
}, POLL_MS);
watchChanges();
mount();
