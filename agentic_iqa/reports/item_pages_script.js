(() => {
  "use strict";
  const data = JSON.parse(document.getElementById("items-data").textContent);
  const rows = data.rows;
  const images = data.images;
  const missing = data.missing;
  const body = document.querySelector("#items tbody");
  const filter = document.getElementById("item-filter");
  const status = document.getElementById("item-status");
  const count = document.getElementById("item-count");
  const panel = document.getElementById("trace");
  const content = document.getElementById("trace-content");
  let sortKey = null;
  let ascending = false;

  const el = (tag, text, css) => {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (css) node.className = css;
    return node;
  };
  const num = (value, digits) => {
    if (value === null || value === undefined || value === "") return "-";
    if (typeof value !== "number") return String(value);
    return value.toFixed(digits === undefined ? 3 : digits);
  };
  const cost = (value) => (value === null || value === undefined ? "-"
    : "$" + (value === 0 ? "0" : value.toPrecision(3)));
  const picture = (path, css) => {
    if (!path) return el("span", "no image recorded", css + " placeholder");
    if (images[path]) {
      const img = el("img", null, css);
      img.src = images[path];
      img.alt = "thumbnail of " + path;
      return img;
    }
    return el("span", "no thumbnail: " + (missing[path] || "unknown"), css + " placeholder");
  };
  const errorText = (row) => {
    if (row.verdict) return row.verdict;
    if (row.rank_error === null || row.rank_error === undefined) return "-";
    return (row.rank_error > 0 ? "+" : "") + row.rank_error.toFixed(3);
  };
  const cell = (tr, text, css) => {
    const td = el("td", text, css);
    tr.appendChild(td);
    return td;
  };

  const sortValue = {
    id: (row) => row.id,
    truth: (row) => row.truth,
    answer: (row) => row.answer,
    error: (row) => row.disagreement,
    tools: (row) => row.tools,
    time: (row) => row.time_s,
    cost: (row) => row.cost_usd,
    status: (row) => row.status,
  };
  const compare = (a, b) => {
    const missingA = a === null || a === undefined;
    const missingB = b === null || b === undefined;
    if (missingA || missingB) return missingA === missingB ? 0 : missingA ? 1 : -1;
    if (typeof a === "number" && typeof b === "number") return a - b;
    return String(a).localeCompare(String(b), undefined, {numeric: true});
  };

  const render = () => {
    const words = filter.value.trim().toLowerCase().split(/\s+/).filter(Boolean);
    const wanted = status.value;
    let shown = rows.filter((row) => {
      if (wanted && row.status !== wanted) return false;
      const text = [row.id, row.status, row.tools, row.answer, row.why, row.verdict]
        .join(" ").toLowerCase();
      return words.every((word) => text.includes(word));
    });
    if (sortKey) {
      const value = sortValue[sortKey];
      shown = shown.slice().sort((a, b) => {
        const order = compare(value(a), value(b));
        const va = value(a);
        const vb = value(b);
        if (va === null || va === undefined || vb === null || vb === undefined) return order;
        return ascending ? order : -order;
      });
    }
    const rowsOut = document.createDocumentFragment();
    for (const row of shown) {
      const tr = el("tr");
      tr.dataset.id = row.id;
      tr.tabIndex = 0;
      const name = cell(tr, null, "text id");
      name.appendChild(el("span", row.id, "key token"));
      name.appendChild(el("span", "line " + row.line + " · " + row.why, "note why"));
      const thumb = cell(tr, null, "thumb");
      thumb.appendChild(picture(row.image, "small"));
      cell(tr, num(row.truth));
      cell(tr, num(row.answer), typeof row.answer === "number" ? "" : "text");
      cell(tr, errorText(row));
      cell(tr, row.tools || "-", "text");
      cell(tr, num(row.time_s, 1));
      cell(tr, cost(row.cost_usd));
      cell(tr, row.status, "text");
      rowsOut.appendChild(tr);
    }
    body.replaceChildren(rowsOut);
    count.textContent = shown.length + " of " + rows.length + " rows";
  };

  const table = (headers, entries) => {
    const out = el("table");
    const head = el("tr");
    headers.forEach(([label, css]) => head.appendChild(el("th", label, css || "")));
    out.appendChild(head);
    for (const values of entries) {
      const tr = el("tr");
      values.forEach((value, at) => cell(tr, value, headers[at][1] || ""));
      out.appendChild(tr);
    }
    return out;
  };
  const pairTable = (entries) => {
    const out = el("table", null, "pairs");
    for (const [label, value, css] of entries) {
      if (value === null || value === undefined || value === "") continue;
      const tr = el("tr");
      tr.appendChild(el("th", label, "text"));
      cell(tr, value, "text " + (css || ""));
      out.appendChild(tr);
    }
    return out;
  };
  const section = (title, node) => {
    content.appendChild(el("h3", title));
    content.appendChild(node);
  };
  const none = (text) => el("p", text, "note");

  const open = (id) => {
    const row = rows.find((entry) => entry.id === id);
    if (!row) {
      content.replaceChildren(el("p", "No item " + id + " on this page: " + data.elsewhere,
                                 "note"));
      panel.hidden = false;
      return;
    }
    const trace = row.trace;
    const item = trace.item;
    const run = trace.run || {};
    const truth = trace.truth || {};
    const answer = trace.answer || {};
    content.replaceChildren();
    const title = el("h2", null, "token");
    title.textContent = item.id;
    content.appendChild(title);
    content.appendChild(el("p", "line " + item.line + " · " + item.status + " · on this page: "
                           + row.why, "note"));
    const failure = item.error || run.error;
    if (failure) content.appendChild(el("p", "Failed: " + failure, "failure token"));
    const pictures = el("div", null, "pictures");
    for (const [label, path] of [["image", item.image], ["reference", item.reference]]) {
      if (!path && label === "reference") continue;
      const figure = el("figure");
      figure.appendChild(picture(path, "large"));
      figure.appendChild(el("figcaption", label, "note"));
      pictures.appendChild(figure);
    }
    content.appendChild(pictures);
    section("Item", pairTable([
      ["query", item.query], ["image", item.image, "token"],
      ["reference", item.reference, "token"],
      [truth.kind === "mcq" ? "truth" : "MOS", num(truth.truth)],
      [truth.kind === "mcq" ? "answered" : "score",
       truth.kind === "mcq" ? truth.answer_letter : num(answer.quality_score)],
      ["rank error", truth.rank_error === undefined ? null : errorText(row)],
      ["score rank / MOS rank", truth.score_rank ? truth.score_rank + " / " + truth.mos_rank
        + " of " + truth.ranked_items : null],
      ["right", truth.kind === "mcq" ? row.verdict : null],
      ["run", run.id ? [run.status, run.iterations + " iteration(s)",
        num(run.duration_s, 1) + " s", run.backend].filter(Boolean).join(", ") : "never ran"],
      ["run notes", (run.notes || []).join("; ")],
    ]));
    const plan = trace.plan;
    section("Plan", plan ? pairTable([
      ["query type", plan.query_type], ["scope", plan.query_scope],
      ["distortion source", plan.distortion_source],
      ["distortions", plan.distortions ? JSON.stringify(plan.distortions) : null],
      ["reference", plan.reference_mode], ["required tool", plan.required_tool],
      ["excluded tools", (plan.excluded_tools || []).join(", ")],
      ["answer mode", plan.answer_mode],
      ["steps", Object.entries(plan.flags || {}).filter(([, on]) => on)
        .map(([step]) => step.replace(/_/g, " ")).join(", ")],
    ]) : none("No plan (a metric job, or the item never ran)."));
    section("Distortions", trace.distortions.length ? table(
      [["object", "text"], ["type", "text"], ["severity", "text"], ["explanation", "text"]],
      trace.distortions.map((d) => [d.object, d.type, d.severity, d.explanation]))
      : none("No distortion analysed."));
    section("Tools", trace.tools.length ? table(
      [["iteration"], ["object", "text"], ["distortion", "text"], ["tool", "text"],
       ["raw score"], ["[1, 5]"], ["time (s)"], ["note", "text"]],
      trace.tools.map((t) => [t.iteration, t.object, t.distortion || "-",
        t.tool + (t.requested_tool && t.requested_tool !== t.tool
          ? " (asked: " + t.requested_tool + ")" : ""),
        num(t.raw_score), num(t.score), num(t.time_s, 2),
        [t.fallback ? "fallback" : "", t.cached ? "cached" : "", t.error || ""]
          .filter(Boolean).join("; ") || "-"]))
      : none("No tool ran."));
    section("Answer", trace.answer ? pairTable([
      ["answer", answer.final_answer], ["score", num(answer.quality_score)],
      ["reasoning", answer.reasoning],
      ["score from", answer.probability_source],
      ["follow-up", answer.answered_in_follow_up ? "answered in the follow-up question" : null],
      ["unparseable", answer.answer_unparseable ? answer.unparseable_reason || "yes" : null],
      ["notes", (answer.notes || []).join("; ")],
    ]) : none("No answer."));
    section("Replans", trace.replans.length ? table(
      [["iteration"], ["why", "text"], ["failure", "text"]],
      trace.replans.map((r) => [r.iteration, r.reason || "-", r.failure || "-"]))
      : none("No replan."));
    const usage = trace.usage || {};
    section("Model calls", trace.model_calls.length ? table(
      [["call", "text"], ["model", "text"], ["tokens in (cached) / out", "text"], ["cost"],
       ["latency (s)"], ["error", "text"]],
      trace.model_calls.map((c) => [
        [c.role, c.step || c.task].filter(Boolean).join(": ") || "-",
        c.backend + "/" + c.model,
        num(c.input_tokens, 0) + " (" + num(c.cached_tokens, 0) + ") / "
          + num(c.output_tokens, 0),
        c.cached ? "cached" : cost(c.cost_usd), num(c.latency_s, 2), c.error || "-"]))
      : none("No model call recorded."));
    content.appendChild(el("p", usage.calls + " call(s), " + usage.cache_hits
      + " cache hit(s), " + usage.input_tokens + " input and " + usage.output_tokens
      + " output tokens, cost " + cost(usage.cost_usd) + "; models: "
      + (usage.models || []).join(", "), "note"));
    const cut = Object.entries(trace.cut || {});
    if (cut.length) {
      content.appendChild(el("p", "Cut for the page: " + cut.map(([key, n]) => key + " ("
        + n + ")").join(", ") + "; " + data.elsewhere, "note"));
    }
    panel.hidden = false;
    panel.scrollTop = 0;
    document.getElementById("trace-close").focus();
  };

  const fromHash = () => {
    const found = /^#item=(.*)$/.exec(window.location.hash);
    if (found) {
      let id = found[1];
      try { id = decodeURIComponent(id); } catch (error) { /* a bare "%": the id as written */ }
      open(id);
    } else {
      panel.hidden = true;
    }
  };
  const show = (id) => {
    history.pushState(null, "", "#item=" + encodeURIComponent(id));
    open(id);
  };

  for (const th of document.querySelectorAll("#items th[data-key]")) {
    th.addEventListener("click", () => {
      const key = th.dataset.key;
      ascending = sortKey === key ? !ascending : key === "id";
      sortKey = key;
      for (const other of document.querySelectorAll("#items th[data-key]")) {
        other.removeAttribute("aria-sort");
      }
      th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      render();
    });
  }
  body.addEventListener("click", (event) => {
    const tr = event.target.closest("tr");
    if (tr) show(tr.dataset.id);
  });
  body.addEventListener("keydown", (event) => {
    const tr = event.target.closest("tr");
    if (tr && event.key === "Enter") show(tr.dataset.id);
  });
  document.getElementById("trace-close").addEventListener("click", () => {
    history.pushState("", document.title, window.location.pathname + window.location.search);
    fromHash();
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !panel.hidden) document.getElementById("trace-close").click();
  });
  filter.addEventListener("input", render);
  status.addEventListener("change", render);
  window.addEventListener("hashchange", fromHash);
  window.itemPages = {open: open, render: render};
  render();
  fromHash();
  document.body.dataset.itemsRenderedMs = String(Math.round(performance.now()));
})();
