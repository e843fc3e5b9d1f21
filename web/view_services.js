// Services: every service behind the ingress (GET /api/v0/services): its status, READY replicas against the target,
// requests waiting, and per replica its state, address, requests in flight and served, linked to its gang run; then
// each service's latest events (replicas submitted, READY, draining, replaced; autoscaling decisions).

import { h, badge, table, empty, section, renderIfChanged, fmtDuration } from './dom.js';
import { getJson } from './api.js';

export function servicesView(root) {
  const body = h('div', { id: 'services' });
  root.append(h('h1', {}, 'Services'), body);

  async function refresh() {
    const services = await getJson('/api/v0/services');
    const now = Date.now();
    renderIfChanged(body, [services, Math.floor(now / 5000)], () => {
      if (services.length === 0) {
        return empty('No service is deployed: `torus serve deploy SPEC` (docs/serving.md).');
      }
      return services.map((s) => {
        const replicas = s.replicas.length === 0 ? empty('No replicas.') :
          table(['replica', 'version', 'state', 'address', 'in flight', 'requests', 'age'],
            s.replicas.map((r) => h('tr', { dataset: { replica: r.run_id, state: r.state } },
              h('td', {}, h('a', { href: `#/runs/${encodeURIComponent(r.run_id)}` }, r.name)),
              h('td', {}, String(r.version)),
              h('td', {}, badge(r.state)),
              h('td', {}, r.address || '–'),
              h('td', {}, String(r.in_flight)),
              h('td', {}, String(r.requests)),
              h('td', {}, fmtDuration(now - r.created_ms)))), { class: 'service-replicas' });
        const events = s.events.length === 0 ? null :
          h('ul', { class: 'service-events' }, s.events.slice().reverse().map((e) => h('li', { class: 'reason' }, e)));
        const head = h('p', {},
          badge(s.status), ` version ${s.version} · ${s.ready_replicas}/${s.target_replicas} READY · `,
          `${s.queued_requests} waiting · `, s.url ? h('code', {}, s.url) : h('code', {}, s.route_prefix));
        return h('div', { class: 'service', dataset: { service: s.name, status: s.status } },
          section(s.name, [head, replicas, events].filter((x) => x !== null)));
      });
    });
  }
  return { refresh };
}
