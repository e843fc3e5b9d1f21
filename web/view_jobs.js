// Jobs (the Ray Jobs API): the list, and one job with its details and log.

import { h, badge, table, empty, renderIfChanged, setChildren, section, fmtTime, fmtDuration } from './dom.js';
import { getJson, getOptional, q, enc } from './api.js';
import { LogViewer } from './logs.js';

function jobId(j) {
  return j.submission_id || j.job_id;
}

export function jobsView(root) {
  const body = h('div', { id: 'jobs-list' });
  root.append(h('h1', {}, 'Jobs'), body);

  async function refresh() {
    const jobs = (await getOptional('/api/jobs/')) || [];
    const now = Date.now();
    const rows = jobs.slice().sort((a, b) => (b.start_time || 0) - (a.start_time || 0) || jobId(a).localeCompare(jobId(b)))
      .map((j) => [jobId(j), j.status, j.entrypoint, j.driver_node_id, j.start_time,
        j.start_time ? fmtDuration((j.end_time || now) - j.start_time) : '–', j.message]);
    renderIfChanged(body, rows, () => (rows.length === 0 ? empty('No jobs yet. Submit one with `torus job submit`.') :
      table(['job', 'status', 'entrypoint', 'node', 'started', 'duration', 'message'],
        rows.map(([id, status, entrypoint, nodeId, start, duration, message]) => h('tr', { dataset: { job: id, status } },
          h('td', {}, h('a', { href: `#/jobs/${enc(id)}` }, id)),
          h('td', {}, badge(status)),
          h('td', {}, h('code', {}, entrypoint || '')),
          h('td', {}, nodeId ? h('a', { href: `#/nodes/${enc(nodeId)}` }, nodeId) : '–'),
          h('td', {}, fmtTime(start)),
          h('td', {}, duration),
          h('td', { class: 'reason' }, message || ''))), { id: 'jobs-table' })));
  }
  return { refresh };
}

export function jobView(root, route) {
  const id = route.parts[1];
  const header = h('div', { id: 'job-header' });
  const logBox = h('div', { id: 'job-log-box' });
  root.append(h('p', {}, h('a', { href: '#/jobs' }, '← jobs')), header, section('Log', logBox));
  root.dataset.job = id;
  let viewer = null;

  async function refresh() {
    const job = await getOptional(`/api/jobs/${enc(id)}`);
    if (!job) {
      setChildren(header, h('h1', {}, id), empty('No such job.'));
      return;
    }
    root.dataset.status = job.status;
    renderIfChanged(header, job, () => [
      h('h1', {}, jobId(job), ' ', badge(job.status)),
      h('dl', { class: 'facts' },
        h('dt', {}, 'entrypoint'), h('dd', {}, h('code', {}, job.entrypoint || '')),
        h('dt', {}, 'message'), h('dd', {}, job.message || '–'),
        job.error_type ? [h('dt', {}, 'error'), h('dd', {}, job.error_type)] : null,
        h('dt', {}, 'node'), h('dd', {}, job.driver_node_id ? h('a', { href: `#/nodes/${enc(job.driver_node_id)}` }, job.driver_node_id) : '–'),
        h('dt', {}, 'started'), h('dd', {}, fmtTime(job.start_time)),
        h('dt', {}, 'ended'), h('dd', {}, fmtTime(job.end_time)),
        job.driver_exit_code !== null && job.driver_exit_code !== undefined ? [h('dt', {}, 'exit code'), h('dd', {}, String(job.driver_exit_code))] : null,
        Object.keys(job.metadata || {}).length ? [h('dt', {}, 'metadata'),
          h('dd', {}, Object.entries(job.metadata).map(([k, v]) => h('span', { class: 'label-chip' }, `${k}=${v}`)))] : null),
    ]);
    if (!viewer) {
      viewer = new LogViewer(async (offset) => {
        const chunk = await getJson(`/api/v0/jobs/${enc(id)}/logs${q({ offset })}`);
        return { data: chunk.data, next: chunk.next_offset, finished: chunk.finished };
      }, { attrs: { id: 'job-log', dataset: { job: id } }, follow: ['PENDING', 'RUNNING'].includes(job.status),
        emptyText: '(no output yet)' });
      setChildren(logBox, viewer.element);
      await viewer.poll(true);
    } else {
      await viewer.poll();
    }
  }
  return { refresh };
}
