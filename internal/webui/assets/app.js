// thrum's web console. It signs in with a one-time login code (from the
// URL's fragment, which never reaches a server) or, after that, with the
// web session the code was exchanged for (kept in this tab's
// sessionStorage, never in a URL); then everything goes over JSON-RPC on
// the daemon's WebSocket. New messages arrive by push (subscribe all), and
// so do the receipts of every message (subscribe receipts: all), which
// update each message's marks in place. Nothing here marks a message
// read: watching never consumes an agent's messages.

import { Rpc, RpcError } from './rpc.js';
import { render, shown } from './markdown.js';
import { renderSnippet } from './highlight.js';

const $ = (id) => document.getElementById(id);
const SESSION_KEY = 'thrum.web_session';
const FEED_MAX = 500;
const OFFLINE_LONG_MS = 10000;

const state = {
  rpc: null,
  me: '',            // the person's user ID, as "user:leon"
  agents: new Map(), // agent_id → AgentInfo
  contexts: new Map(), // agent_id → WorkContext of its latest session
  groups: new Map(), // name → GroupInfo with .members
  threads: new Map(), // thread_id → title
  feed: new Map(),   // message_id → message (MessageDetail shape)
  receipts: new Map(), // message_id → {receipts, ack_required, ack_due}, as message.get and pushes say
  view: 'feed',
  replyTo: null,
  thread: '',        // open thread
  chain: '',         // open reply chain: its first message's ID
  originals: new Map(), // message_id → message fetched as the start of a reply chain
  inbox: '',         // open inbox
  search: { query: '', page: 1 }, // the search shown
  retry: 0,
  offlineSince: 0,   // when the connection was lost, 0 while connected
  longTimer: 0,
};

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = shown(text);
  return e;
}

function setConn(s, text) {
  const c = $('conn');
  c.dataset.state = s;
  c.textContent = text || s;
}

// ---- sign-in and connection ----

// takeLoginCode reads #login=CODE and removes it from the address bar and
// history at once, so the used code is not left in the tab.
function takeLoginCode() {
  const m = /(?:^#|&)login=([A-Za-z0-9_-]+)/.exec(location.hash);
  if (location.hash) history.replaceState(null, '', location.pathname + location.search);
  return m ? m[1] : '';
}

function signedOut(message) {
  clearTimeout(state.longTimer);
  state.offlineSince = 0;
  sessionStorage.removeItem(SESSION_KEY);
  if (state.rpc) state.rpc.close();
  state.rpc = null;
  $('app').hidden = true;
  $('signin').hidden = false;
  $('signin-error').textContent = message || '';
  setConn('signed-out', 'signed out');
}

async function connect(code) {
  const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/ws`;
  // The login code, or else the saved web session, goes in the
  // handshake: the connection is the owner's from the start, so strangers
  // filling the daemon's small pool of connections that have not
  // authenticated cannot keep the console out. If the daemon refuses it
  // (a used or expired code or session, or a restarted daemon), connect
  // without it and let auth say why. auth with the code then returns the
  // web session the handshake traded it for.
  const credential = code || sessionStorage.getItem(SESSION_KEY) || '';
  let rpc = new Rpc(url, { onNotify, onClose: () => reconnect(), credential });
  if (!state.offlineSince) setConn('connecting', 'connecting');
  try {
    await rpc.open();
  } catch (e) {
    if (!credential) throw e;
    rpc = new Rpc(url, { onNotify, onClose: () => reconnect() });
    await rpc.open();
  }
  state.rpc = rpc;
  try {
    if (code) {
      const res = await rpc.call('auth', { login_code: code });
      sessionStorage.setItem(SESSION_KEY, res.web_session);
    } else {
      await rpc.call('auth', { web_session: sessionStorage.getItem(SESSION_KEY) });
    }
  } catch (e) {
    if (e instanceof RpcError) return signedOut(e.message);
    throw e;
  }
  await becomeMe();
  await rpc.call('subscribe', { all: true });
  await rpc.call('subscribe', { receipts: 'all' });
  state.retry = 0;
  state.offlineSince = 0;
  clearTimeout(state.longTimer);
  setConn('live', 'live');
  $('signin').hidden = true;
  $('app').hidden = false;
  await loadAll();
}

// becomeMe binds the connection to the person at the browser: a user
// named after git's user.name (or "owner"), registered by the owner.
async function becomeMe() {
  let username = 'owner';
  let display = '';
  try {
    const who = await state.rpc.call('user.identify', {});
    if (who.username) { username = who.username.slice(0, 32); display = who.display; }
  } catch { /* no git user: stay "owner" */ }
  const r = await state.rpc.call('user.register', { username, display });
  state.me = r.user_id;
  $('me').textContent = `signed in as ${r.user_id} (owner)`;
  $('acting-as').options[0].textContent = `myself (${r.user_id})`;
}

// reconnect tries again, ever more slowly, with the saved web session,
// which the daemon keeps across a restart, on the port it binds again
// when free. A restart takes seconds: a daemon silent for longer stopped,
// or started on another port (its own was taken) that this page cannot
// know, so it says where to go.
function reconnect() {
  if (!sessionStorage.getItem(SESSION_KEY)) return;
  if (!state.offlineSince) {
    state.offlineSince = Date.now();
    state.longTimer = setTimeout(() => setConn('offline',
      'no answer for 10 s: the daemon stopped, or restarted on another port: run thrum web'), OFFLINE_LONG_MS);
  }
  if (Date.now() - state.offlineSince < OFFLINE_LONG_MS) setConn('offline', 'offline: reconnecting');
  const wait = Math.min(5000, 500 * 2 ** state.retry++);
  setTimeout(() => connect('').catch(() => reconnect()), wait);
}

function call(method, params) {
  if (!state.rpc) return Promise.reject(new RpcError({ code: -32000, message: 'not connected' }));
  return state.rpc.call(method, params);
}

// ---- data ----

async function loadAll() {
  await Promise.all([loadAgents(), loadGroups(), loadThreads()]);
  await loadFeed();
  showView(state.view);
}

async function loadAgents() {
  const [list, ctx] = await Promise.all([call('agent.list', {}), call('agent.listContext', {})]);
  state.agents = new Map(list.agents.map((a) => [a.agent_id, a]));
  state.contexts = new Map();
  for (const c of ctx.contexts) {
    const old = state.contexts.get(c.agent_id);
    if (!old || (c.git_updated_at || '') > (old.git_updated_at || '')) state.contexts.set(c.agent_id, c);
  }
  fillAddresses();
}

async function loadGroups() {
  const res = await call('group.list', {});
  const groups = new Map();
  await Promise.all(res.groups.map(async (g) => {
    try { g.members = (await call('group.members', { name: g.name })).members; } catch { g.members = []; }
    groups.set(g.name, g);
  }));
  state.groups = groups;
  fillAddresses();
}

async function loadThreads() {
  const res = await call('thread.list', { page_size: 100 });
  state.threads = new Map(res.threads.map((t) => [t.thread_id, t.title]));
  return res.threads;
}

async function loadFeed() {
  const res = await call('message.list', { page_size: 100, sort_order: 'desc' });
  const details = await Promise.all(res.messages.map((m) => getMessage(m.message_id).catch(() => null)));
  state.feed = new Map();
  state.receipts = new Map(); // pushes were missed while disconnected: what message.get says now
  $('feed').replaceChildren();
  for (const d of details.reverse()) if (d) addToFeed(d, false);
}

async function getMessage(id, as) {
  const p = { message_id: id };
  if (as) p.caller_agent_id = as;
  return (await call('message.get', p)).message;
}

function onNotify(method, params) {
  if (method === 'notification.receipt' && params) return onReceipt(params);
  if (method !== 'notification.message' || !params) return;
  getMessage(params.message_id).then((m) => {
    addToFeed(m, true);
    if (!state.agents.has(m.author.agent_id)) loadAgents();
    if (m.thread_id && !state.threads.has(m.thread_id)) loadThreads();
    refreshOpenView();
  }).catch(() => {});
}

// onReceipt puts a pushed receipt in its message's receipts and redraws
// the message's marks wherever it is shown.
function onReceipt(p) {
  const known = state.receipts.get(p.message_id);
  if (!known) return; // not shown: its marks are read when it is
  const i = known.receipts.findIndex((r) => r.agent_id === p.receipt.agent_id);
  if (i < 0) known.receipts.push(p.receipt);
  else known.receipts[i] = p.receipt;
  redrawReceipts(p.message_id);
}

function redrawReceipts(id) {
  const known = state.receipts.get(id);
  for (const old of document.querySelectorAll(`li.msg[data-id="${CSS.escape(id)}"] > footer > .receipts`)) {
    old.replaceWith(receiptMarks(known, old.open));
  }
}

function refreshOpenView() {
  const quiet = () => {}; // the next push or a click tries again
  if (state.view === 'agents') loadAgents().then(renderAgents).catch(quiet);
  if (state.view === 'threads') renderThreads().catch(quiet);
  if (state.view === 'inbox') renderInboxes().catch(quiet);
}

// ---- names and addresses ----

function agentName(id) {
  const a = state.agents.get(id);
  if (!a) return id;
  return a.kind === 'user' ? id : (a.name || id);
}

function agentLabel(id) {
  const a = state.agents.get(id);
  if (!a || a.kind === 'user') return agentName(id);
  return `${agentName(id)} (${a.role}${a.module ? '/' + a.module : ''})`;
}

// addressKind says what a mention names, as the daemon resolved it.
function addressKind(addr) {
  if (addr === 'everyone') return 'everyone';
  if (state.groups.has(addr)) return 'group';
  for (const a of state.agents.values()) {
    if (a.agent_id === addr || a.name === addr) return a.kind === 'user' ? 'user' : 'agent';
  }
  return 'role';
}

// replyTo is the message m answers, or ''.
function replyTo(m) {
  const r = (m.refs || []).find((x) => x.type === 'reply_to');
  return r ? r.value : '';
}

function mentionsOf(m) {
  return (m.refs || []).filter((r) => r.type === 'mention').map((r) => r.value);
}

function fillAddresses() {
  const names = new Set(['everyone']);
  const roles = new Set();
  const sel = $('acting-as');
  const chosen = sel.value;
  while (sel.options.length > 1) sel.remove(1);
  for (const a of state.agents.values()) {
    if (a.kind === 'user') continue;
    if (a.name) names.add(a.name);
    if (a.role) roles.add(a.role);
    const o = el('option', '', agentLabel(a.agent_id));
    o.value = a.agent_id;
    sel.append(o);
  }
  sel.value = chosen;
  fillSearchFilters(roles);
  for (const g of state.groups.keys()) names.add(g);
  const dl = $('addresses');
  dl.replaceChildren();
  for (const n of [...names, ...roles]) {
    const o = el('option');
    o.value = n;
    dl.append(o);
  }
}

// ---- rendering messages ----

function when(ts) {
  const d = new Date(ts);
  if (isNaN(d)) return ts || '';
  return d.toLocaleString();
}

// A body longer than this (characters or lines) shows its first lines,
// with a button for the rest: one long message must not fill the view.
const LONG_CHARS = 800;
const LONG_LINES = 12;

function isLong(text) {
  return text.length > LONG_CHARS || text.split('\n').length > LONG_LINES;
}

function collapse(body) {
  body.classList.add('collapsed');
  const b = el('button', 'more', 'Show more');
  b.type = 'button';
  b.setAttribute('aria-expanded', 'false');
  b.addEventListener('click', () => {
    const open = body.classList.toggle('collapsed') === false;
    b.textContent = open ? 'Show less' : 'Show more';
    b.setAttribute('aria-expanded', String(open));
  });
  return b;
}

// What a message's sender field says (message.get, message.list).
const senderTitles = {
  local: 'written on this machine, by an identity registered here',
  verified: "signed on another machine by a key this clone trusts for its author",
  unverified: 'unsigned, from before its author had a key: nothing proves who wrote it',
};

function messageItem(m, opts = {}) {
  const li = el('li', 'msg');
  li.dataset.id = m.message_id;
  if (opts.unread) li.classList.add('unread');
  const head = el('header');
  const author = m.author ? m.author.agent_id : m.agent_id;
  head.append(el('span', 'author', agentLabel(author)));
  if (m.disclosed_via) head.append(el('span', 'via', `via ${m.disclosed_via}`));
  if (m.sender) {
    const s = el('span', `sender ${m.sender}`, m.sender === 'unverified' ? 'unverified (legacy)' : m.sender);
    s.title = senderTitles[m.sender] || '';
    head.append(s);
  }
  const to = mentionsOf(m);
  if (to.length) {
    head.append(el('span', 'to', '→ ' + to.map((a) => `@${a} (${addressKind(a)})`).join(', ')));
  }
  if (m.priority && m.priority !== 'normal') head.append(el('span', `badge ${m.priority}`, m.priority));
  if (opts.unread) head.append(el('span', 'badge unread', 'unread'));
  if (m.thread_id) {
    const b = el('button', 'linkish', `thread: ${state.threads.get(m.thread_id) || m.thread_id}`);
    b.type = 'button';
    b.addEventListener('click', () => { state.thread = m.thread_id; state.chain = ''; showView('threads'); });
    head.append(b);
  }
  const t = el('time', '', when(m.created_at));
  t.dateTime = m.created_at || '';
  head.append(t);
  li.append(head);
  const body = el('div', 'body');
  const foot = el('footer');
  if (m.deleted) body.append(el('em', '', 'deleted'));
  else if (opts.snippet) body.append(renderSnippet(m.snippet, m.highlights));
  else {
    const content = m.body ? m.body.content : '';
    body.append(render(shown(content)));
    if (isLong(content)) foot.append(collapse(body));
  }
  li.append(body);

  if (opts.snippet) foot.append(openButton(m, body));
  const reply = el('button', '', 'Reply');
  reply.type = 'button';
  reply.addEventListener('click', () => startReply(m));
  const reads = el('button', '', 'Read by');
  reads.type = 'button';
  const readby = el('span', 'readby');
  reads.addEventListener('click', () => showReadBy(m, readby));
  foot.append(reply, reads, readby);
  // The receipts known are kept current by the pushes, so a message
  // object (fetched earlier) only fills in what is not known yet.
  if (m.receipts && !state.receipts.has(m.message_id)) {
    state.receipts.set(m.message_id, { receipts: m.receipts.map((r) => ({ ...r })), ack_required: !!m.ack_required, ack_due: m.ack_due || '' });
  }
  const known = state.receipts.get(m.message_id);
  foot.append(receiptMarks(known || { receipts: [] }, false));
  if (!known && !m.deleted) {
    // A listing's summary has no receipts: message.get has them.
    getMessage(m.message_id).then((d) => {
      state.receipts.set(d.message_id, { receipts: d.receipts || [], ack_required: !!d.ack_required, ack_due: d.ack_due || '' });
      redrawReceipts(d.message_id);
    }).catch(() => {});
  }
  li.append(foot);
  return li;
}

// receiptMarks shows where a message stands with the recipients its
// address reached: ✓ once delivered to all, ✓✓ once acknowledged by all,
// with who and how on hover and in the list it expands to. Nothing for a
// message addressed to no one.
function receiptMarks(k, open) {
  const d = el('details', 'receipts');
  d.open = open;
  const rs = k.receipts;
  if (!rs.length) {
    d.hidden = true;
    return d;
  }
  const delivered = rs.filter((r) => r.state !== 'queued').length;
  const acked = rs.filter((r) => r.state === 'acknowledged').length;
  const all = (n, mark) => (n === rs.length ? mark + ' ' : '') + `${n}/${rs.length}`;
  let text = `${all(delivered, '✓')} delivered`;
  if (acked || k.ack_required) text += ` · ${all(acked, '✓✓')} acknowledged`;
  if (k.ack_required && acked < rs.length) {
    text += k.ack_due && new Date(k.ack_due) < new Date() ? ' · overdue' : ' · ack asked';
  }
  d.dataset.delivered = String(delivered);
  d.dataset.acked = String(acked);
  const summary = el('summary', '', text);
  summary.title = rs.map(receiptLine).join('\n');
  d.append(summary);
  // divs, not a list: a message is one li, and views count them.
  const list = el('div', 'receipt-list');
  for (const r of rs) {
    const line = el('div', `receipt ${r.state}`, receiptLine(r));
    line.dataset.agent = r.agent_id;
    list.append(line);
  }
  d.append(list);
  return d;
}

function receiptLine(r) {
  let s = `${agentName(r.agent_id)}: ${r.state}`;
  if (r.via) s += ` via ${r.via.replaceAll('_', ' ')}`;
  if (r.at) s += `, ${when(r.at)}`;
  if (r.state === 'acknowledged') {
    s += ` · acknowledged ${when(r.acked_at)}`;
    if (r.reply_id) s += ' by a reply';
    if (r.note) s += `: “${r.note}”`;
  }
  return s;
}

// showReadBy asks, for every agent, whether it has read the message
// (message.get as that agent reads nothing and marks nothing).
async function showReadBy(m, out) {
  out.textContent = 'checking…';
  const author = m.author ? m.author.agent_id : m.agent_id;
  const ids = [...state.agents.values()].filter((a) => a.agent_id !== author).map((a) => a.agent_id).slice(0, 100);
  const read = [];
  await Promise.all(ids.map(async (id) => {
    try { if ((await getMessage(m.message_id, id)).is_read) read.push(agentName(id)); } catch { /* not visible to it */ }
  }));
  out.textContent = read.length ? `read by ${read.sort().join(', ')}` : 'read by nobody yet';
}

function addToFeed(m, fresh) {
  const feed = $('feed');
  const old = feed.querySelector(`li[data-id="${CSS.escape(m.message_id)}"]`);
  const li = messageItem(m);
  if (fresh) li.classList.add('fresh');
  state.feed.set(m.message_id, m);
  if (old) old.replaceWith(li);
  else feed.prepend(li);
  while (feed.children.length > FEED_MAX) {
    state.feed.delete(feed.lastElementChild.dataset.id);
    feed.lastElementChild.remove();
  }
  $('feed-empty').hidden = feed.children.length > 0;
}

// ---- views ----

function showView(name) {
  state.view = name;
  for (const b of document.querySelectorAll('.tabs button')) {
    if (b.dataset.view === name) b.setAttribute('aria-current', 'page');
    else b.removeAttribute('aria-current');
  }
  for (const v of document.querySelectorAll('.view')) v.hidden = v.id !== `view-${name}`;
  if (name === 'agents') loadAgents().then(renderAgents).catch(showError);
  if (name === 'threads') renderThreads().catch(showError);
  if (name === 'groups') loadGroups().then(renderGroups).catch(showError);
  if (name === 'inbox') renderInboxes().catch(showError);
}

function showError(e) {
  const s = $('compose-status');
  s.className = 'note bad';
  s.textContent = e.message || String(e);
}

function dl(pairs) {
  const d = el('dl');
  for (const [k, v] of pairs) {
    if (v === undefined || v === null || v === '') continue;
    d.append(el('dt', '', k));
    const dd = el('dd');
    if (v instanceof Node) dd.append(v);
    else dd.textContent = shown(v);
    d.append(dd);
  }
  return d;
}

function renderAgents() {
  const ul = $('agents');
  ul.replaceChildren();
  const agents = [...state.agents.values()].sort((a, b) =>
    (a.status === 'active' ? 0 : 1) - (b.status === 'active' ? 0 : 1) || agentName(a.agent_id).localeCompare(agentName(b.agent_id)));
  for (const a of agents) {
    const li = el('li', 'card');
    li.dataset.agent = a.agent_id;
    const h = el('h3');
    const dot = el('span', `dot ${a.status === 'active' ? 'active' : ''}`);
    dot.title = a.status;
    h.append(dot, agentName(a.agent_id));
    li.append(h);
    const c = state.contexts.get(a.agent_id) || {};
    let files = '';
    const changed = [...new Set([...(c.changed_files || []), ...(c.uncommitted_files || [])])];
    if (changed.length) {
      const det = el('details');
      det.append(el('summary', '', `${changed.length} file${changed.length === 1 ? '' : 's'}`));
      const ul2 = el('ul');
      for (const f of changed) ul2.append(el('li', '', f));
      det.append(ul2);
      files = det;
    }
    li.append(dl([
      ['presence', `${a.status}${a.last_seen_at ? ', seen ' + when(a.last_seen_at) : ''}`],
      ['kind', a.kind],
      ['role', a.role], ['module', a.module],
      ['intent', c.intent], ['task', c.current_task],
      ['branch', c.branch], ['worktree', c.worktree_path],
      ['changed', files],
    ]));
    ul.append(li);
  }
  if (!agents.length) ul.append(el('li', 'empty', 'No agents registered.'));
}

// A reply chain — a message outside any thread and the replies to it
// (reply_to refs), as thrum reply makes — is a conversation to a person as
// much as a thread is, so the threads view lists both. Chains are found
// among the messages the feed holds (following each reply up to the
// message that started it); opening one fetches every reply to it.
async function replyChains() {
  const known = (id) => state.feed.get(id) || state.originals.get(id);
  const startOf = async (m) => {
    const seen = new Set([m.message_id]);
    for (let p = replyTo(m); p && !seen.has(p) && seen.size < 50; p = replyTo(m)) {
      seen.add(p);
      let o = known(p);
      if (!o) {
        try { o = await getMessage(p); } catch { break; } // deleted, or not visible
        state.originals.set(p, o);
      }
      m = o;
    }
    return m;
  };
  const chains = new Map(); // first message's ID → {first, last}
  for (const m of state.feed.values()) {
    if (!replyTo(m) || m.thread_id) continue;
    const first = await startOf(m);
    if (first.thread_id || first.message_id === m.message_id) continue;
    const c = chains.get(first.message_id) || { first, last: first.created_at };
    if (m.created_at > c.last) c.last = m.created_at;
    chains.set(first.message_id, c);
  }
  return [...chains.values()].sort((a, b) => (a.last < b.last ? 1 : a.last > b.last ? -1 : 0));
}

// chainOf returns the message id and every reply to it, to any depth (at
// most 200), oldest first.
async function chainOf(id) {
  const msgs = [await getMessage(id)];
  const seen = new Set([id]);
  for (let i = 0; i < msgs.length && msgs.length < 200; i++) {
    const res = await call('message.list', { ref: { type: 'reply_to', value: msgs[i].message_id }, page_size: 100, sort_order: 'asc' });
    for (const r of res.messages) {
      if (!seen.has(r.message_id)) { seen.add(r.message_id); msgs.push(r); }
    }
  }
  return msgs.sort((a, b) => (a.created_at < b.created_at ? -1 : a.created_at > b.created_at ? 1 : 0));
}

// firstWords is a one-line title for a chain: its first message's start.
function firstWords(m) {
  const text = (m.body ? m.body.content : '').replace(/\s+/g, ' ').trim();
  return text.length > 60 ? text.slice(0, 59) + '…' : text || m.message_id;
}

async function renderThreads() {
  const [threads, chains] = await Promise.all([call('thread.list', { page_size: 100 }), replyChains()]);
  state.threads = new Map(threads.threads.map((t) => [t.thread_id, t.title]));
  const ul = $('threads');
  ul.replaceChildren();
  const entry = (title, sub, current, open) => {
    const li = el('li');
    const b = el('button');
    b.type = 'button';
    if (current) b.setAttribute('aria-current', 'true');
    const left = el('span', '', title);
    left.append(el('br'), el('span', 'sub', sub));
    b.append(left);
    b.addEventListener('click', () => { open(); renderThreads().catch(showError); });
    li.append(b);
    ul.append(li);
    return li;
  };
  for (const t of threads.threads) {
    entry(t.title || t.thread_id, `${t.message_count} messages · ${when(t.last_activity)}`, t.thread_id === state.thread,
      () => { state.thread = t.thread_id; state.chain = ''; });
  }
  for (const c of chains) {
    const author = c.first.author ? c.first.author.agent_id : c.first.agent_id;
    const li = entry(firstWords(c.first), `replies to ${agentName(author)} · ${when(c.last)}`, c.first.message_id === state.chain,
      () => { state.chain = c.first.message_id; state.thread = ''; });
    li.dataset.chain = c.first.message_id;
  }
  if (!threads.threads.length && !chains.length) ul.append(el('li', 'empty', 'No threads or replies yet.'));
  const box = $('thread');
  if (state.thread) {
    const res = await call('thread.get', { thread_id: state.thread, page_size: 100 });
    const msgs = res.messages.slice().sort((a, b) => (a.created_at < b.created_at ? -1 : a.created_at > b.created_at ? 1 : 0));
    const h = el('h2', '', res.thread.title || res.thread.thread_id);
    const by = el('p', 'note', `started by ${agentName(res.thread.created_by)} · ${when(res.thread.created_at)} · ${res.total} messages`);
    const ol = el('ol', 'messages');
    for (const m of msgs) ol.append(messageItem(m));
    const reply = el('button', '', 'Reply in this thread');
    reply.type = 'button';
    reply.addEventListener('click', () => startReply(msgs[msgs.length - 1] || { thread_id: state.thread }));
    box.replaceChildren(h, by, ol, reply);
  } else if (state.chain) {
    const msgs = await chainOf(state.chain);
    const first = msgs[0];
    const author = first.author ? first.author.agent_id : first.agent_id;
    const h = el('h2', '', firstWords(first));
    const by = el('p', 'note', `a reply chain started by ${agentName(author)} · ${when(first.created_at)} · ${msgs.length} messages`);
    const ol = el('ol', 'messages');
    for (const m of msgs) {
      const li = messageItem(m);
      if (m !== first) li.classList.add('reply');
      ol.append(li);
    }
    const reply = el('button', '', 'Reply to the latest');
    reply.type = 'button';
    reply.addEventListener('click', () => startReply(msgs[msgs.length - 1]));
    box.replaceChildren(h, by, ol, reply);
  }
}

function renderGroups() {
  const ul = $('groups');
  ul.replaceChildren();
  for (const g of [...state.groups.values()].sort((a, b) => a.name.localeCompare(b.name))) {
    const li = el('li', 'card');
    li.append(el('h3', '', g.name));
    const members = el('ul');
    if (g.name === 'everyone') members.append(el('li', '', 'every agent'));
    for (const m of g.members || []) members.append(el('li', '', `${m.type === 'role' ? 'role ' : ''}${m.id}`));
    li.append(dl([['about', g.description], ['members', members], ['made by', g.created_by]]));
    ul.append(li);
  }
  if (!state.groups.size) ul.append(el('li', 'empty', 'No groups.'));
}

// inboxOf lists what is addressed to an agent, as that agent would see it
// (by name, role, group or everyone), with its unread count.
function inboxOf(id, size) {
  return call('message.list', { caller_agent_id: id, mentions: true, page_size: size, sort_order: 'desc' });
}

async function renderInboxes() {
  const agents = [...state.agents.values()].filter((a) => a.kind !== 'user');
  const counts = await Promise.all(agents.map((a) => inboxOf(a.agent_id, 1).catch(() => null)));
  const ul = $('inboxes');
  ul.replaceChildren();
  agents.forEach((a, i) => {
    const li = el('li');
    li.dataset.agent = a.agent_id;
    const b = el('button');
    b.type = 'button';
    if (a.agent_id === state.inbox) b.setAttribute('aria-current', 'true');
    const c = counts[i];
    b.append(el('span', '', agentLabel(a.agent_id)));
    const n = el('span', 'badge unread count', c ? `${c.unread} unread / ${c.total}` : '?');
    b.append(n);
    b.addEventListener('click', () => { state.inbox = a.agent_id; renderInboxes().catch(showError); });
    li.append(b);
    ul.append(li);
  });
  if (!agents.length) ul.append(el('li', 'empty', 'No agents registered.'));
  if (!state.inbox) return;
  const res = await inboxOf(state.inbox, 50);
  const box = $('inbox');
  const ol = el('ol', 'messages');
  for (const m of res.messages) ol.append(messageItem(m, { unread: !m.is_read }));
  box.replaceChildren(el('h2', '', `Inbox of ${agentLabel(state.inbox)}`),
    el('p', 'note', `${res.unread} unread of ${res.total}. Looking never marks anything read.`), ol);
}

// ---- search ----

// fillSearchFilters offers every agent and person as an author and every
// agent's role as a recipient role.
function fillSearchFilters(roles) {
  const sel = $('search-author');
  const chosen = sel.value;
  while (sel.options.length > 1) sel.remove(1);
  for (const a of [...state.agents.values()].sort((x, y) => agentName(x.agent_id).localeCompare(agentName(y.agent_id)))) {
    const o = el('option', '', agentLabel(a.agent_id));
    o.value = a.agent_id;
    sel.append(o);
  }
  sel.value = chosen;
  const dl = $('search-roles');
  dl.replaceChildren();
  for (const r of roles) {
    const o = el('option');
    o.value = r;
    dl.append(o);
  }
}

// openButton shows a result as the feed does: its thread, or the whole
// message in place of the snippet.
function openButton(m, body) {
  const b = el('button', 'open', m.thread_id ? 'Open thread' : 'Show message');
  b.type = 'button';
  b.addEventListener('click', async () => {
    if (m.thread_id) {
      state.thread = m.thread_id;
      state.chain = '';
      showView('threads');
      return;
    }
    try {
      const full = await getMessage(m.message_id);
      body.replaceChildren(full.deleted ? el('em', '', 'deleted') : render(shown(full.body ? full.body.content : '')));
      b.remove();
    } catch (e) {
      showError(e);
    }
  });
  return b;
}

// RELEVANCE_LIMIT is store.RelevanceLimit: past this many matches the
// daemon sorts newest first (the result's sort_by says so).
const RELEVANCE_LIMIT = 2000;

function plural(n, one, many) {
  return `${n.toLocaleString('en')} ${n === 1 ? one : many}`;
}

async function search(q, page = 1) {
  state.search = { query: q, page };
  showView('search');
  const status = $('search-status');
  const ol = $('results');
  ol.replaceChildren();
  $('search-pager').hidden = true;
  status.className = 'note';
  status.textContent = `Searching for “${q}”…`;
  const sortBy = $('search-sort').value;
  const p = { query: q, page, page_size: 25, sort_by: sortBy };
  if ($('search-author').value) p.author_id = $('search-author').value;
  const role = $('search-role').value.trim().replace(/^@/, '');
  if (role) p.mention_role = role;
  let res;
  try {
    res = await call('message.search', p);
  } catch (e) {
    if (state.search.query !== q || state.search.page !== page) return; // a newer search is shown
    status.className = 'note bad';
    if (e.code === -32601) status.textContent = 'Search is not available: this daemon has no message.search.';
    // The page sends only filters it offers, so invalid params is the query.
    else if (e.code === -32602) status.textContent = `Malformed query: ${e.message.replace(/^query: /, '')}`;
    else status.textContent = `Cannot search: ${e.message}`;
    return;
  }
  if (state.search.query !== q || state.search.page !== page) return;
  let text = res.total ? `${plural(res.total, 'message matches', 'messages match')} “${q}”` : `No messages match “${q}”.`;
  if (res.total && res.sort_by === 'created_at') {
    text += sortBy === 'created_at' ? ', newest first.'
      : `: past ${RELEVANCE_LIMIT.toLocaleString('en')} matches they are sorted newest first, not by relevance.`;
  } else if (res.total) {
    text += ', most relevant first.';
  }
  status.textContent = text;
  for (const r of res.results) ol.append(messageItem(r, { snippet: true }));
  if (res.total_pages > 1) {
    $('search-pager').hidden = false;
    $('search-page').textContent = `page ${res.page} of ${res.total_pages}`;
    $('search-prev').disabled = res.page <= 1;
    $('search-next').disabled = res.page >= res.total_pages;
  }
}

function searchAgain(page = 1) {
  if (state.search.query) search(state.search.query, page);
}

// ---- compose ----

function startReply(m) {
  state.replyTo = m;
  const author = m.author ? m.author.agent_id : m.agent_id;
  $('reply-text').textContent = m.message_id
    ? `Replying to ${agentName(author)}${m.thread_id ? ' in ' + (state.threads.get(m.thread_id) || 'its thread') : ''}`
    : 'Writing in this thread';
  $('reply-to').hidden = false;
  if (author) {
    const a = state.agents.get(author);
    $('to').value = a && a.kind !== 'user' ? a.name || author : author;
  }
  $('body').focus();
}

function cancelReply() {
  state.replyTo = null;
  $('reply-to').hidden = true;
}

function updateActNote() {
  const as = $('acting-as').value;
  $('disclose-label').hidden = !as;
  const note = $('act-note');
  note.hidden = !as;
  if (!as) return;
  note.textContent = $('disclose').checked
    ? `Sent as ${agentName(as)}, marked “via ${state.me}” for everyone to see.`
    : `Sent as ${agentName(as)} with no mark: readers will take it for ${agentName(as)}'s own words.`;
}

async function send(ev) {
  ev.preventDefault();
  const status = $('compose-status');
  const content = $('body').value;
  const mentions = $('to').value.split(/[\s,]+/).map((s) => s.replace(/^@/, '')).filter(Boolean);
  if (!content.trim() || !mentions.length) {
    status.className = 'note bad';
    status.textContent = 'Name at least one recipient and write something.';
    return;
  }
  const p = { content, format: 'markdown', mentions, priority: $('priority').value, idempotency_key: crypto.randomUUID() };
  const r = state.replyTo;
  if (r && r.thread_id) p.thread_id = r.thread_id;
  if (r && r.message_id) p.refs = [{ type: 'reply_to', value: r.message_id }];
  const as = $('acting-as').value;
  if (as) { p.acting_as = as; p.disclose = $('disclose').checked; }
  $('send').disabled = true;
  status.className = 'note';
  status.textContent = 'sending…';
  try {
    const res = await call('message.send', p);
    const reached = (res.recipients || []).map((x) => `@${x.address}: ${x.agents.length} agent${x.agents.length === 1 ? '' : 's'}`);
    status.textContent = `Sent ${res.message_id}${reached.length ? ' (' + reached.join(', ') + ')' : ''}`;
    $('body').value = '';
    cancelReply();
    // Our own messages are not pushed back to us: show them here.
    addToFeed(await getMessage(res.message_id), true);
    if (state.view !== 'feed') refreshOpenView();
  } catch (e) {
    status.className = 'note bad';
    status.textContent = e.message || String(e);
  } finally {
    $('send').disabled = false;
  }
}

// ---- start ----

function wire() {
  for (const b of document.querySelectorAll('.tabs button')) b.addEventListener('click', () => showView(b.dataset.view));
  $('agents-refresh').addEventListener('click', () => loadAgents().then(renderAgents).catch(showError));
  $('compose').addEventListener('submit', send);
  $('body').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) $('compose').requestSubmit();
  });
  $('reply-cancel').addEventListener('click', cancelReply);
  $('acting-as').addEventListener('change', updateActNote);
  $('disclose').addEventListener('change', updateActNote);
  $('search-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const q = $('search').value.trim();
    if (q) search(q);
  });
  $('search-filters').addEventListener('submit', (e) => { e.preventDefault(); searchAgain(); });
  for (const id of ['search-author', 'search-role', 'search-sort']) $(id).addEventListener('change', () => searchAgain());
  $('search-prev').addEventListener('click', () => searchAgain(state.search.page - 1));
  $('search-next').addEventListener('click', () => searchAgain(state.search.page + 1));
}

// start signs in with code (or the tab's web session), replacing any
// connection this tab has.
function start(code) {
  if (state.rpc) {
    state.rpc.onClose = () => {};
    state.rpc.close();
    state.rpc = null;
  }
  if (!code && !sessionStorage.getItem(SESSION_KEY)) return signedOut('');
  connect(code).catch((e) => signedOut(`Cannot reach the daemon: ${e.message}`));
}

wire();
start(takeLoginCode());
// Presence has no push (an agent goes offline by falling silent), so the
// agents view, while shown, asks again every 30 s. Messages are pushed.
setInterval(() => {
  if (state.view === 'agents' && state.rpc && !document.hidden) loadAgents().then(renderAgents).catch(() => {});
}, 30000);
// A login URL pasted into this tab changes only the fragment.
window.addEventListener('hashchange', () => {
  const code = takeLoginCode();
  if (code) start(code);
});
