// The toolserver routes the CLI uses, with the server's JSON errors turned
// into readable ones.

import { UsageError } from './bundle.mjs';

/** A client of one server with one token. */
export class Api {
  constructor(url, token) {
    this.base = url.replace(/\/+$/, '');
    this.token = token;
  }

  async request(method, path, body) {
    let response;
    try {
      response = await fetch(`${this.base}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${this.token}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (err) {
      throw new UsageError(`cannot reach ${this.base}: ${err.cause?.message ?? err.message}`);
    }
    if (response.status === 204) {
      return null;
    }
    const text = await response.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = null;
    }
    if (!response.ok) {
      const error = json?.error;
      const detail = error ? `${error.code}: ${error.message}` : text.slice(0, 500);
      throw new UsageError(`${method} ${path} answered ${response.status} (${detail})`);
    }
    return json;
  }

  /** Every tool of the account, following the pages. */
  async listTools() {
    const tools = [];
    let cursor = null;
    do {
      const query = new URLSearchParams({ limit: '200', ...(cursor ? { cursor } : {}) });
      const page = await this.request('GET', `/accounts/me/tools?${query}`);
      tools.push(...page.tools);
      cursor = page.nextCursor ?? null;
    } while (cursor);
    return tools;
  }

  createTool(manifest) {
    return this.request('POST', '/accounts/me/tools', manifest);
  }

  updateTool(toolId, changes) {
    return this.request('PATCH', `/accounts/me/tools/${encodeURIComponent(toolId)}`, changes);
  }

  deleteTool(toolId) {
    return this.request('DELETE', `/accounts/me/tools/${encodeURIComponent(toolId)}`);
  }
}
