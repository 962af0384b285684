// The cluster page (/cluster/): pools, the runs holding room, the queue; live over /ws/cluster/.
//
// The page is drawn from the JSON the server handed over (json_script "cluster-data"), then redrawn from
// each {"type": "cluster", ...} the socket sends: one on connect, one after each change the scheduler or a
// worker reports (runs.cluster_consumer). A dropped socket reconnects with the same backoff as the run
// page's (live.js); 4001 (not logged in) is final.
(() => {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const setLive = window.dapoLive.indicator($("live-indicator"));
  const num = (x) => (x === null || x === undefined ? "?" : `${Math.round(x * 100) / 100}`);
  const plural = (n, unit) => `${num(n)} ${unit}${n === 1 ? "" : "s"}`;

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    if (cls) node.className = cls;
    return node;
  }
  function runCell(r) {
    const td = el("td");
    if (r.name === undefined) { td.textContent = `#${r.id}`; return td; }  // not readable: number only
    const a = el("a", `#${r.id} ${r.name}`);
    a.href = `/runs/${r.id}/`;
    td.appendChild(a);
    if (r.needs) td.appendChild(el("div", r.needs, "muted small"));
    return td;
  }
  function row(cells) {
    const tr = el("tr");
    cells.forEach((c) => tr.appendChild(c instanceof Node ? c : el("td", c)));
    return tr;
  }
  function resources(res) {
    if (!res) return "";
    const parts = [];
    if (res.GPU) parts.push(plural(res.GPU, "GPU"));
    if (res.CPU !== undefined) parts.push(plural(res.CPU, "CPU"));
    return parts.join(", ");
  }

  function drawPools(pools) {
    const box = $("cluster-pools");
    box.replaceChildren();
    pools.forEach((p) => {
      const card = el("section", undefined, "card pool");
      card.appendChild(el("h3", p.name === "ray" ? "Ray" : "Local (the worker's machine)"));
      if (!p.recorded) {
        card.appendChild(el("p", "No worker has recorded it yet (it does when it starts a run): runs wait for a worker slot only.", "muted small"));
      } else {
        card.appendChild(el("p", `${p.describe}. Free: ${plural(p.free.gpus, "GPU")}, ${plural(p.free.cpus, "CPU")} (held by runs: ${plural(p.held.gpus, "GPU")}, ${plural(p.held.cpus, "CPU")}).`));
        const seen = p.seen_at ? `seen ${p.seen_at.slice(0, 16).replace("T", " ")} UTC${p.seen_by ? ` by ${p.seen_by}` : ""}` : "";
        card.appendChild(el("p", `${p.address ? `${p.address}, ` : ""}${seen}`, "muted small"));
      }
      const nodes = el("ul", undefined, "nodes");
      p.nodes.forEach((n) => {
        const li = el("li", undefined, n.alive ? "" : "dead");
        li.appendChild(el("span", `${n.host || n.node_id.slice(0, 12) || "node"}${n.alive ? "" : " (dead)"}`));
        const free = n.available ? `; free ${resources(n.available) || "nothing"}` : "";
        li.appendChild(el("span", `${resources(n.total)}${free}`, "small"));
        nodes.appendChild(li);
      });
      if (p.nodes.length) card.appendChild(nodes);
      box.appendChild(card);
    });
  }

  function drawRunning(running) {
    const body = $("cluster-running").tBodies[0];
    body.replaceChildren();
    running.forEach((r) => {
      const holds = [r.holds.gpus ? plural(r.holds.gpus, "GPU") : "", plural(r.holds.cpus, "CPU")].filter(Boolean).join(", ");
      const state = r.preempt_requested ? "pre-empting" : r.status === "running" && r.step !== undefined ? `running, step ${r.step}/${r.total_steps || "?"}` : r.status;
      const groups = r.groups.map((g) => `${g.role || g.name}: ${g.state}${g.node_ids.length ? ` on ${g.node_ids.map((id) => id.slice(0, 8)).join(", ")}` : ""}`).join("; ");
      body.appendChild(row([runCell(r), r.owner, r.pool, state, el("td", holds, "num"), groups || "–"]));
    });
    $("running-empty").hidden = running.length > 0;
  }

  function drawQueue(queue) {
    const body = $("cluster-queue").tBodies[0];
    body.replaceChildren();
    queue.forEach((q) => {
      body.appendChild(row([el("td", `${q.position}`, "num"), runCell(q), q.owner, q.pool, el("td", `${q.priority}`, "num"), q.reason]));
    });
    $("queue-empty").hidden = queue.length > 0;
  }

  function draw(data) {
    $("cluster-slots").textContent = `${data.slots.busy} of ${data.slots.total} busy (runs sent to a worker or running; DAPO_SCHEDULER_SLOTS).`;
    drawPools(data.pools);
    drawRunning(data.running);
    drawQueue(data.queue);
  }

  draw(JSON.parse($("cluster-data").textContent));

  let backoff = window.dapoLive.BACKOFF_MIN_MS;
  function open() {
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(`${proto}://${location.host}/ws/cluster/`);
    socket.onmessage = (e) => {
      const ev = JSON.parse(e.data);
      if (ev.type !== "cluster") return;
      backoff = window.dapoLive.BACKOFF_MIN_MS;
      setLive("live", "live");
      draw(ev);
    };
    socket.onclose = (e) => {
      if (e.code === 4001) { setLive("no access", "off"); return; }
      setLive("reconnecting…", "wait");
      setTimeout(open, backoff * (0.75 + Math.random() / 2));
      backoff = Math.min(backoff * 2, window.dapoLive.BACKOFF_MAX_MS);
    };
  }
  open();
})();
