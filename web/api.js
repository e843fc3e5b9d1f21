// Reads the head's JSON API. The session cookie set by the login URL (/?token=...) authenticates every request;
// when the page was opened with ?token= it is also sent as a bearer header (and dropped from the address bar).

let bearer = null;
const params = new URLSearchParams(window.location.search);
if (params.has('token')) {
  bearer = params.get('token');
  params.delete('token');
  const query = params.toString();
  window.history.replaceState(null, '', window.location.pathname + (query ? `?${query}` : '') + window.location.hash);
}

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

const listeners = new Set();
// fn(state) is called with 'ok', 'unauthorized' or 'unreachable' whenever the head answers (or does not).
export function onConnectionState(fn) {
  listeners.add(fn);
}
function report(state) {
  for (const fn of listeners) fn(state);
}

// GET path → parsed JSON. Throws ApiError (status 0 when the head cannot be reached).
export async function getJson(path) {
  const headers = { Accept: 'application/json' };
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  let res;
  try {
    res = await fetch(path, { credentials: 'same-origin', headers, cache: 'no-store' });
  } catch (e) {
    report('unreachable');
    throw new ApiError(0, `cannot reach the head: ${e.message}`);
  }
  const text = await res.text();
  if (res.status === 401) {
    report('unauthorized');
    throw new ApiError(401, 'not logged in');
  }
  report('ok');
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch (e) {
    body = null;
  }
  if (!res.ok) {
    // Errors are {"error": "..."}, except the Ray Jobs routes, which answer plain text.
    const message = body && typeof body.error === 'string' ? body.error : text || `HTTP ${res.status}`;
    throw new ApiError(res.status, message);
  }
  if (body === null && text) throw new ApiError(res.status, `${path}: the answer is not JSON`);
  return body;
}

// Like getJson, but null when the route or object does not exist (404).
export async function getOptional(path) {
  try {
    return await getJson(path);
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return null;
    throw e;
  }
}

// Routes that may not exist on an older head answer 404 as a whole; remembering that keeps the page from asking
// again on every refresh (each 404 is a failed request in the browser's console). While a family's first request
// is out, the others wait for its answer instead of all failing at once.
const missingSince = new Map(); // feature → time its route answered "no route"
const probes = new Map(); // feature → the promise of its first request
const MISSING_RETRY_MS = 60000;

function isNoRoute(e) {
  return e instanceof ApiError && e.status === 404 && /^no route/.test(e.message);
}

// getOptional for a route family (e.g. 'metrics') that an older head lacks: null when the head does not serve it.
export async function getFeature(feature, path) {
  const since = missingSince.get(feature);
  if (since !== undefined) {
    if (Date.now() - since < MISSING_RETRY_MS) return null;
    missingSince.delete(feature); // time to ask again
    probes.delete(feature);
  }
  const probe = probes.get(feature);
  if (probe) {
    await probe.catch(() => null);
    if (missingSince.has(feature)) return null;
  }
  const request = getJson(path);
  if (!probes.has(feature)) probes.set(feature, request);
  try {
    const body = await request;
    missingSince.delete(feature);
    return body;
  } catch (e) {
    if (isNoRoute(e)) {
      missingSince.set(feature, Date.now());
      return null;
    }
    if (e instanceof ApiError && e.status === 404) return null;
    throw e;
  }
}

export function q(params) {
  const out = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') out.set(k, String(v));
  const text = out.toString();
  return text ? `?${text}` : '';
}

export const enc = encodeURIComponent;

// The latest value of one metric per series: [{labels, value, t}].
export async function latestMetric(name, labels) {
  const body = await getFeature('metrics', `/api/v0/metrics${q({ name, since: '-2m', latest: 'true', ...labels })}`);
  if (!body || !Array.isArray(body.series)) return [];
  return body.series
    .filter((s) => Array.isArray(s.points) && s.points.length > 0)
    .map((s) => {
      const p = s.points[s.points.length - 1];
      return { labels: s.labels || {}, t: p[0], value: p[1] };
    });
}

// Series of one metric since sinceMs: [{name, labels, points: [[t, v]...]}], [] when none or not served. The window
// goes to the head relative to its own clock ("-900000ms"), so a browser whose clock is off still sees the data.
export async function metricSeries(name, sinceMs, labels) {
  const window = Math.max(0, Math.round(Date.now() - sinceMs));
  const body = await getFeature('metrics', `/api/v0/metrics${q({ name, since: `-${window}ms`, ...labels })}`);
  if (!body || !Array.isArray(body.series)) return [];
  return body.series.filter((s) => Array.isArray(s.points));
}
