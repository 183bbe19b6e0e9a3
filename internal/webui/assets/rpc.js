// A JSON-RPC 2.0 client over one WebSocket: one message per frame, calls
// matched to replies by id, notifications handed to onNotify.

export class RpcError extends Error {
  constructor(e) {
    super(e.message || 'error');
    this.code = e.code;
    this.data = e.data;
  }
}

export class Rpc {
  // credential, if given, is presented in the handshake (a browser cannot
  // set an Authorization header: it offers the subprotocol
  // "bearer.<credential>" beside "jsonrpc", which the daemon selects), so
  // the connection is authenticated from the start.
  constructor(url, { onNotify, onClose, credential } = {}) {
    this.url = url;
    this.credential = credential || '';
    this.onNotify = onNotify || (() => {});
    this.onClose = onClose || (() => {});
    this.pending = new Map();
    this.nextId = 1;
    this.ws = null;
  }

  // open resolves once the socket is open, and rejects if it fails first.
  open() {
    return new Promise((resolve, reject) => {
      const ws = this.credential
        ? new WebSocket(this.url, ['jsonrpc', 'bearer.' + this.credential])
        : new WebSocket(this.url);
      this.ws = ws;
      let opened = false;
      ws.addEventListener('open', () => { opened = true; resolve(); });
      ws.addEventListener('message', (ev) => this.receive(ev.data));
      ws.addEventListener('close', (ev) => {
        for (const p of this.pending.values()) p.reject(new RpcError({ code: -32000, message: 'connection closed' }));
        this.pending.clear();
        if (!opened) reject(new Error('cannot connect to the daemon'));
        else this.onClose(ev);
      });
    });
  }

  receive(text) {
    let msg;
    try { msg = JSON.parse(text); } catch { return; }
    for (const m of Array.isArray(msg) ? msg : [msg]) {
      if (m.id === undefined || m.id === null) {
        if (m.method) this.onNotify(m.method, m.params);
        continue;
      }
      const p = this.pending.get(m.id);
      if (!p) continue;
      this.pending.delete(m.id);
      if (m.error) p.reject(new RpcError(m.error));
      else p.resolve(m.result);
    }
  }

  call(method, params) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) {
      return Promise.reject(new RpcError({ code: -32000, message: 'not connected' }));
    }
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params: params || {} }));
    });
  }

  close() { if (this.ws) this.ws.close(); }
}
