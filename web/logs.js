// A log viewer: a <pre> that reads a log in chunks from an offset and, in follow mode, keeps asking for new bytes.

import { h, setChildren } from './dom.js';
import { ApiError } from './api.js';

const MAX_SHOWN = 2 * 1024 * 1024; // characters kept on the page; older text is dropped from the top
const MAX_CHUNKS_PER_POLL = 8;

// fetchChunk(offset) → {data, next, finished}; `start` is the first offset to read (e.g. -65536 for a tail when the
// source supports reading from the end). attrs go on the <pre> (ids and data attributes for tests).
export class LogViewer {
  constructor(fetchChunk, { start = 0, follow = true, attrs = {}, emptyText = '(empty)' } = {}) {
    this.fetchChunk = fetchChunk;
    this.start = start;
    this.offset = start;
    this.finished = false;
    this.busy = false;
    this.emptyText = emptyText;
    this.pre = h('pre', { class: 'log', tabindex: '0', ...attrs });
    this.status = h('span', { class: 'muted log-status' });
    this.followBox = h('input', { type: 'checkbox', class: 'log-follow', checked: follow,
      onchange: () => { if (this.followBox.checked) this.poll(); } });
    this.text = '';
    this.element = h('div', { class: 'log-viewer' },
      h('div', { class: 'toolbar' },
        h('label', {}, this.followBox, ' follow'),
        h('button', { type: 'button', onclick: () => this.poll(true) }, 'refresh'),
        h('button', { type: 'button', onclick: () => this.scrollToEnd() }, 'end'),
        this.status),
      this.pre);
    this.showText();
  }

  get following() {
    return this.followBox.checked;
  }

  scrollToEnd() {
    this.pre.scrollTop = this.pre.scrollHeight;
  }

  showText() {
    this.pre.dataset.empty = this.text ? 'false' : 'true';
    setChildren(this.pre, this.text || this.emptyText);
  }

  // Reads whatever is new. Called on every refresh of the view; reads only when following, or when forced.
  async poll(force = false) {
    if (this.busy || (!force && !this.following && this.offset !== this.start)) return;
    if (this.finished && !force) return;
    this.busy = true;
    try {
      const atEnd = this.pre.scrollHeight - this.pre.scrollTop - this.pre.clientHeight < 24;
      let added = '';
      for (let i = 0; i < MAX_CHUNKS_PER_POLL; i++) {
        const chunk = await this.fetchChunk(this.offset);
        if (!chunk) break;
        added += chunk.data || '';
        const moved = chunk.next !== this.offset;
        this.offset = chunk.next;
        this.finished = Boolean(chunk.finished);
        if (!chunk.data || !moved || this.finished) break;
      }
      if (added) {
        const wasEmpty = !this.text;
        this.text += added;
        if (this.text.length > MAX_SHOWN) this.text = this.text.slice(this.text.length - MAX_SHOWN);
        this.showText();
        if (atEnd || wasEmpty) this.scrollToEnd();
      } else if (!this.text) {
        this.showText();
      }
      this.pre.dataset.offset = String(this.offset);
      this.pre.dataset.finished = String(this.finished);
      setChildren(this.status, this.finished ? 'finished' : `${this.offset} bytes read`);
    } catch (e) {
      setChildren(this.status, e instanceof ApiError ? e.message : String(e));
      if (e instanceof ApiError && e.status !== 0 && e.status !== 401) this.pre.dataset.error = e.message;
    } finally {
      this.busy = false;
    }
  }
}

// Byte length of a string as UTF-8, for sources whose offsets count bytes.
export function utf8Length(text) {
  return new TextEncoder().encode(text).length;
}
