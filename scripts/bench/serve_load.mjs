// The load generator of scripts/bench/serve_load.sh (Node's own fetch, no packages): streaming
// completions against OpenAI-compatible servers, the same requests to each.
//
//   node serve_load.mjs load URL MODEL CLIENTS SECONDS MAX_TOKENS
//     CLIENTS clients each send one streamed /v1/completions request after another for SECONDS;
//     prints one JSON line: tokens (streamed chunks with text), aggregate tokens/s, time to first
//     token and inter-token latency (p50, p99, ms), requests, failed requests.
//   node serve_load.mjs faults URL MODEL COUNT
//     COUNT requests of the kinds a server meets in the wild, 4 at a time: streams cut off at a
//     random point, malformed JSON, bodies over the limit, slow clients that send their body in
//     pieces, and ordinary ones; prints one JSON line of what came back.

const [mode, url, model, ...rest] = process.argv.slice(2);
const PROMPT = "Once upon a time";

function percentile(values, p) {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

// One streamed completion; returns {ok, ttft, gaps[], tokens} (times in ms).
async function streamed(maxTokens, signal) {
  const started = performance.now();
  const response = await fetch(url + "/v1/completions", {
    method: "POST", headers: { "Content-Type": "application/json" }, signal,
    body: JSON.stringify({ model, prompt: PROMPT, max_tokens: maxTokens, temperature: 0, stream: true }),
  });
  if (response.status !== 200) {
    await response.text();
    return { ok: false, status: response.status };
  }
  const decoder = new TextDecoder();
  let buffer = "", last = null, ttft = null, tokens = 0, done = false;
  const gaps = [];
  for await (const bytes of response.body) {
    buffer += decoder.decode(bytes, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.replace(/^data: /, "");
      if (data === "[DONE]") { done = true; continue; }
      let chunk;
      try { chunk = JSON.parse(data); } catch { continue; }
      const text = chunk.choices?.[0]?.text ?? chunk.content ?? "";
      if (text === "") continue;
      const now = performance.now();
      if (ttft === null) ttft = now - started; else gaps.push(now - last);
      last = now;
      tokens++;
    }
  }
  return { ok: done, ttft, gaps, tokens };
}

async function load(clients, seconds, maxTokens) {
  const until = performance.now() + seconds * 1000;
  const ttfts = [], gaps = [];
  let tokens = 0, requests = 0, failed = 0;
  const started = performance.now();
  await Promise.all(Array.from({ length: clients }, async () => {
    while (performance.now() < until) {
      try {
        const r = await streamed(maxTokens);
        requests++;
        if (!r.ok) { failed++; continue; }
        tokens += r.tokens;
        ttfts.push(r.ttft);
        gaps.push(...r.gaps);
      } catch {
        requests++;
        failed++;
      }
    }
  }));
  const elapsed = (performance.now() - started) / 1000;
  return { clients, tokens, tokens_per_s: tokens / elapsed, seconds: elapsed, requests, failed,
    ttft_p50: percentile(ttfts, 50), ttft_p99: percentile(ttfts, 99), itl_p50: percentile(gaps, 50),
    itl_p99: percentile(gaps, 99) };
}

async function post(body, headers = {}) {
  const response = await fetch(url + "/v1/completions", { method: "POST",
    headers: { "Content-Type": "application/json", ...headers }, body });
  await response.text();
  return response.status;
}

// A client that sends its body in pieces, pausing between them (a slow uplink).
async function slow(body) {
  const pieces = body.match(/.{1,8}/gs);
  const stream = new ReadableStream({
    async pull(controller) {
      const piece = pieces.shift();
      if (piece === undefined) { controller.close(); return; }
      await new Promise((resolve) => setTimeout(resolve, 20));
      controller.enqueue(new TextEncoder().encode(piece));
    },
  });
  const response = await fetch(url + "/v1/completions", { method: "POST", body: stream, duplex: "half",
    headers: { "Content-Type": "application/json" } });
  await response.text();
  return response.status;
}

async function faults(count) {
  const statuses = {};
  const kinds = { cut: 0, malformed: 0, oversized: 0, slow: 0, ordinary: 0 };
  let next = 0, unexpected = 0;
  const ordinary = JSON.stringify({ model, prompt: PROMPT, max_tokens: 8, temperature: 0 });
  async function one(i) {
    const kind = ["cut", "malformed", "oversized", "slow", "ordinary"][i % 5];
    kinds[kind]++;
    let status;
    if (kind === "cut") { // a stream given up at a random point
      const controller = new AbortController();
      setTimeout(() => controller.abort(), Math.random() * 40);
      try { await streamed(64, controller.signal); status = "cut"; } catch { status = "cut"; }
    } else if (kind === "malformed") {
      status = await post('{"model": "' + model + '", "prompt": ' + "[".repeat(1 + (i % 7)));
      if (status !== 400) unexpected++;
    } else if (kind === "oversized") {
      status = await post(JSON.stringify({ model, prompt: "x".repeat(2 << 20) }));
      if (status !== 413) unexpected++;
    } else if (kind === "slow") {
      status = await slow(ordinary);
      if (status !== 200) unexpected++;
    } else {
      status = await post(ordinary);
      if (status !== 200) unexpected++;
    }
    statuses[status] = (statuses[status] ?? 0) + 1;
  }
  await Promise.all(Array.from({ length: 4 }, async () => {
    while (next < count) await one(next++).catch(() => { unexpected++; });
  }));
  return { requests: count, kinds, statuses, unexpected };
}

if (mode === "load") {
  const [clients, seconds, maxTokens] = rest.map(Number);
  console.log(JSON.stringify(await load(clients, seconds, maxTokens)));
} else if (mode === "faults") {
  console.log(JSON.stringify(await faults(Number(rest[0]))));
} else {
  console.error("usage: node serve_load.mjs load URL MODEL CLIENTS SECONDS MAX_TOKENS | faults URL MODEL COUNT");
  process.exit(2);
}
