/* evalpipe sample browser: filters, search, paging and side-by-side runs over the samples that
 * evalpipe/report/browser.py embeds as JSON in the element #samples-data.
 *
 * Plain ES2017, no library, no network: the report must work when opened from a file:// URL.
 * The data contract is documented in browser.py (BrowserData). Nothing here computes a metric;
 * the page shows and filters what it is given.
 *
 * The view state lives in the URL fragment, "#samples?task=…&run=…&compare=…&outcome=…&parse=…
 * &sample=…&q=…&page=…", so a link reproduces a view. It is read on load and on hashchange and
 * written with history.replaceState on every change of a control (no history entry per keystroke).
 *
 * Speed: search strings are lower-cased once at start-up; a filter change is one pass over the
 * samples and renders one page (PAGE_SIZE rows) as an HTML string.
 */
(function () {
  "use strict";

  var section = document.getElementById("samples");
  var app = section.querySelector(".sb-app");
  var data = JSON.parse(document.getElementById("samples-data").textContent);

  var PAGE_SIZE = parseInt(app.getAttribute("data-page-size"), 10) || 50;
  // parameter order of the fragment; browser.py's samples_fragment() writes the same order
  var KEYS = ["task", "run", "compare", "outcome", "parse", "sample", "q", "page"];
  // texts longer than this (characters or lines) are folded behind a "show all" button
  var FOLD_CHARS = 400, FOLD_LINES = 8;
  // outcome categories in reading order; others follow alphabetically
  var OUTCOME_ORDER = ["correct", "incorrect", "boundary", "type", "boundary+type", "missed", "spurious",
                       "parse_failure", "error"];
  var STYLED = {"correct": 1, "incorrect": 1, "boundary": 1, "type": 1, "boundary-type": 1, "missed": 1,
                "spurious": 1, "parse-failure": 1, "error": 1};

  // ---- helpers ------------------------------------------------------------------------------------

  function esc(value) {
    return String(value).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
    });
  }

  /** All leaf values of a JSON value as one string (for search). */
  function flatten(value) {
    if (value === null || value === undefined) return "";
    if (typeof value !== "object") return String(value);
    var parts = [];
    for (var key in value) parts.push(flatten(value[key]));
    return parts.join(" ");
  }

  /** A value for display: strings as they are, anything else as JSON. */
  function show(value) {
    if (value === null || value === undefined) return "";
    return typeof value === "string" ? value : JSON.stringify(value);
  }

  function number(value) {
    if (value === null || value === undefined) return "–";
    if (typeof value !== "number") return String(value);
    return Number.isInteger(value) ? String(value) : value.toFixed(3);
  }

  /** CSS class of an outcome category ("boundary+type" → "c-boundary-type"). */
  function categoryClass(category) {
    var name = String(category).replace(/[^A-Za-z0-9]+/g, "-");
    return "c-" + (STYLED[name] ? name : "other");
  }

  function badge(category, text) {
    return '<span class="sb-badge ' + categoryClass(category) + '">' + esc(text || category) + "</span>";
  }

  /** Pre-formatted text, folded behind a "show all" toggle when long. */
  function foldable(text) {
    text = String(text);
    var lines = text.split("\n");
    if (text.length <= FOLD_CHARS && lines.length <= FOLD_LINES) return '<span class="sb-text">' + esc(text) + "</span>";
    var cut = Math.min(FOLD_CHARS, lines.slice(0, FOLD_LINES).join("\n").length);
    return '<span class="sb-fold"><span class="sb-text sb-fold-short">' + esc(text.slice(0, cut)) + "…</span>" +
      '<span class="sb-text sb-fold-full" hidden>' + esc(text) + "</span>" +
      '<button type="button" class="sb-fold-more" aria-expanded="false">show all (' + text.length +
      " characters)</button></span>";
  }

  // ---- index (once) -------------------------------------------------------------------------------

  // fractional[task][score key]: some sample has a non-integer value, so every value of that
  // column is written with decimals (JSON cannot tell 0.0 from 0; the report writes 0.000 too)
  var runByKey = {}, taskByName = {}, taskCounts = {}, outcomeSet = {}, fractional = {};
  data.runs.forEach(function (run) { runByKey[run.key] = run; });
  data.tasks.forEach(function (task) { taskByName[task.name] = task; taskCounts[task.name] = 0; fractional[task.name] = {}; });
  data.samples.forEach(function (sample) {
    taskCounts[sample.task] += 1;
    var gold = sample.gold_text !== undefined && sample.gold_text !== null ? sample.gold_text : flatten(sample.gold);
    sample._search = (sample.id + "\n" + flatten(sample.input) + "\n" + gold).toLowerCase();
    for (var key in sample.runs) {
      var result = sample.runs[key] || {};
      sample.runs[key] = result;
      var prediction = result.prediction_text !== undefined ? result.prediction_text : flatten(result.prediction);
      result._search = ((result.answer || "") + "\n" + (prediction || "") + "\n" + (result.error || "")).toLowerCase();
      (result.outcomes || []).forEach(function (o) { outcomeSet[o] = true; });
      for (var score in result.scores || {}) {
        var v = result.scores[score];
        if (typeof v === "number" && !Number.isInteger(v)) fractional[sample.task][score] = true;
      }
    }
  });
  var outcomes = Object.keys(outcomeSet).sort(function (a, b) {
    var ia = OUTCOME_ORDER.indexOf(a), ib = OUTCOME_ORDER.indexOf(b);
    if (ia < 0) ia = OUTCOME_ORDER.length;
    if (ib < 0) ib = OUTCOME_ORDER.length;
    return ia - ib || (a < b ? -1 : a > b ? 1 : 0);
  });

  // ---- state and the URL fragment -----------------------------------------------------------------

  var state = emptyState();

  function emptyState() {
    var s = {};
    KEYS.forEach(function (k) { s[k] = ""; });
    s.page = 1;
    return s;
  }

  /** The state in the current fragment, or null when the fragment is not ours. */
  function stateFromHash() {
    var hash = location.hash;
    if (hash !== "#samples" && hash.indexOf("#samples?") !== 0) return null;
    var params = new URLSearchParams(hash.slice("#samples?".length));
    var s = emptyState();
    KEYS.forEach(function (k) { if (params.get(k) !== null) s[k] = params.get(k); });
    s.page = Math.max(1, parseInt(s.page, 10) || 1);
    return s;
  }

  function fragment(s) {
    var params = new URLSearchParams();
    KEYS.forEach(function (k) {
      var v = k === "page" ? (s.page > 1 ? String(s.page) : "") : s[k];
      if (v) params.append(k, v);
    });
    var query = params.toString();
    return "#samples" + (query ? "?" + query : "");
  }

  function writeHash() {
    var target = fragment(state);
    if (location.hash === target) return;
    try {
      history.replaceState(history.state, "", target);
    } catch (e) {
      location.replace(target); // some browsers refuse replaceState on file:// pages
    }
  }

  // ---- filtering ----------------------------------------------------------------------------------

  function compareActive() {
    return !!(state.run && state.compare && state.compare !== state.run &&
              runByKey[state.run] && runByKey[state.compare]);
  }

  /** Does one run's result pass the outcome and parse filters? */
  function passes(result) {
    if (state.outcome && (result.outcomes || []).indexOf(state.outcome) < 0) return false;
    if (state.parse === "failed" && result.parse_failed !== true) return false;
    if (state.parse === "ok" && result.parse_failed !== false) return false;
    return true;
  }

  function matches(terms, texts) {
    for (var i = 0; i < terms.length; i++) {
      var found = false;
      for (var j = 0; j < texts.length && !found; j++) found = texts[j].indexOf(terms[i]) >= 0;
      if (!found) return false;
    }
    return true;
  }

  /** The rows of the current state: {sample, run, other} — other only in side-by-side mode. */
  function filteredRows() {
    var terms = state.q.toLowerCase().split(/\s+/).filter(Boolean);
    var side = compareActive();
    var runKeys = state.run ? [state.run] : data.runs.map(function (r) { return r.key; });
    var rows = [];
    data.samples.forEach(function (sample) {
      if (state.task && sample.task !== state.task) return;
      if (state.sample && sample.id !== state.sample) return;
      runKeys.forEach(function (key) {
        var result = sample.runs[key];
        if (!result || !passes(result)) return;
        var texts = [sample._search, result._search];
        var other = side ? sample.runs[state.compare] : undefined;
        if (other) texts.push(other._search);
        if (terms.length && !matches(terms, texts)) return;
        rows.push({sample: sample, run: key, other: side ? state.compare : null});
      });
    });
    return rows;
  }

  // ---- rendering of one row -----------------------------------------------------------------------

  function fields(pairs) {
    var html = "";
    pairs.forEach(function (p) { if (p[1]) html += "<dt>" + esc(p[0]) + "</dt><dd>" + p[1] + "</dd>"; });
    return html ? '<dl class="sb-fields">' + html + "</dl>" : "";
  }

  function inputHtml(input) {
    if (!input || typeof input !== "object") return foldable(show(input));
    var keys = Object.keys(input);
    if (keys.length === 1 && typeof input[keys[0]] === "string") return foldable(input[keys[0]]);
    return keys.map(function (k) {
      var value = input[k];
      // a token list that only repeats another field's text (NCBI: text = tokens joined by spaces)
      var same = Array.isArray(value) && keys.filter(function (o) { return o !== k && input[o] === value.join(" "); })[0];
      if (same) {
        return '<div class="sb-muted"><span class="sb-key">' + esc(k) + ":</span> " + value.length +
          " items, the words of " + esc(same) + "</div>";
      }
      return '<div><span class="sb-key">' + esc(k) + ":</span> " + foldable(show(value)) + "</div>";
    }).join("");
  }

  function isBlank(v) {
    return v === false || v === 0 || v === null || v === "" || (Array.isArray(v) && !v.length) ||
      (typeof v === "object" && v !== null && !Object.keys(v).length);
  }

  /** "key: value; …" of an object. With ``quiet`` (parse diagnostics: mostly zero counters and
   *  false flags) only the set ones are listed and the rest are counted. */
  function keyValues(obj, quiet) {
    if (!obj || typeof obj !== "object") return "";
    var keys = Object.keys(obj);
    var shown = quiet ? keys.filter(function (k) { return !isBlank(obj[k]); }) : keys;
    var html = shown.map(function (k) {
      var v = obj[k];
      return '<span class="sb-kv"><span class="sb-key">' + esc(k) + ":</span> " +
        esc(typeof v === "number" ? number(v) : show(v)) + "</span>";
    }).join("; ");
    var rest = keys.length - shown.length;
    if (rest) html += ' <span class="sb-muted">(' + (shown.length ? "and " : "") + rest + " " +
      (rest === 1 ? "other" : "others") + " false, 0 or empty)</span>";
    return html;
  }

  function scoresHtml(scores, task) {
    var decimals = fractional[task.name] || {};
    if (!scores) return "";
    var order = (task.score_keys || []).filter(function (k) { return k in scores; });
    Object.keys(scores).sort().forEach(function (k) { if (order.indexOf(k) < 0) order.push(k); });
    if (!order.length) return "";
    return '<table class="sb-scores"><tr>' + order.map(function (k) { return "<th>" + esc(k) + "</th>"; }).join("") +
      "</tr><tr>" + order.map(function (k) {
        var v = scores[k];
        if (v === null || v === undefined) return '<td title="not defined for this sample">–</td>';
        return "<td>" + esc(typeof v === "number" && decimals[k] ? v.toFixed(3) : number(v)) + "</td>";
      }).join("") + "</tr></table>";
  }

  /** The entities' source as text plus each unit's [start, end) character range, or null. */
  function spanSource(input, task) {
    if (!input) return null;
    var field = task.span_field || (Array.isArray(input.tokens) ? "tokens" : "text");
    var value = input[field];
    if (typeof value === "string") return {text: value, units: null};
    if (!Array.isArray(value)) return null;
    var units = [], text = "";
    value.forEach(function (token, i) {
      if (i) text += " ";
      units.push([text.length, text.length + String(token).length]);
      text += String(token);
    });
    return {text: text, units: units};
  }

  /** Character range of an entity in the source, or null when its offsets do not fit. */
  function charRange(source, e) {
    if (typeof e.start !== "number" || typeof e.end !== "number" || e.end <= e.start || e.start < 0) return null;
    if (source.units) {
      if (e.end > source.units.length) return null;
      return [source.units[e.start][0], source.units[e.end - 1][1]];
    }
    return e.end <= source.text.length ? [e.start, e.end] : null;
  }

  /** The source text with one side's entities marked (nested entities nest; crossing ones are returned apart). */
  function markedLine(source, entities) {
    var placed = [], apart = [];
    entities.forEach(function (e) {
      var range = charRange(source, e);
      if (range) placed.push({e: e, start: range[0], end: range[1], children: []}); else apart.push(e);
    });
    placed.sort(function (a, b) { return a.start - b.start || b.end - a.end; });
    var roots = [], stack = [];
    placed.forEach(function (node) {
      while (stack.length && stack[stack.length - 1].end <= node.start) stack.pop();
      var parent = stack[stack.length - 1];
      if (parent && node.end > parent.end) { apart.push(node.e); return; }
      (parent ? parent.children : roots).push(node);
      stack.push(node);
    });
    function render(from, to, nodes) {
      var html = "", pos = from;
      nodes.forEach(function (n) {
        html += esc(source.text.slice(pos, n.start)) +
          '<mark class="sb-ent ' + categoryClass(n.e.category) + '" title="' +
          esc(n.e.side + " " + n.e.label + ": " + n.e.category) + '">' + render(n.start, n.end, n.children) +
          '<span class="sb-ent-tag">' + esc(n.e.label + " · " + n.e.category) + "</span></mark>";
        pos = n.end;
      });
      return html + esc(source.text.slice(pos, to));
    }
    return {html: render(0, source.text.length, roots), apart: apart};
  }

  function entityChip(e) {
    return badge(e.category, (e.side === "gold" ? "gold " : "predicted ") + e.label + " · " + e.category +
                 ": “" + e.text + "”");
  }

  function entitiesHtml(entities, sample, task) {
    if (!entities || !entities.length) return "";
    var source = spanSource(sample.input, task);
    var html = "", apart = [];
    ["gold", "pred"].forEach(function (side) {
      var mine = entities.filter(function (e) { return e.side === side; });
      var label = side === "gold" ? "gold" : "predicted";
      if (!source) { apart = apart.concat(mine); return; }
      if (!mine.length) {
        html += '<span class="sb-ent-side">' + label + ' (0)</span><span class="sb-muted">none</span>';
        return;
      }
      var line = markedLine(source, mine);
      html += '<span class="sb-ent-side">' + label + " (" + mine.length + ')</span><span class="sb-ent-line sb-text" ' +
        'data-side="' + side + '">' + line.html + "</span>";
      apart = apart.concat(line.apart);
    });
    if (html) html = '<div class="sb-ents">' + html + "</div>";
    if (apart.length) html += "<div>" + apart.map(entityChip).join(" ") + "</div>";
    return html;
  }

  function outcomeHtml(result) {
    var list = (result.outcomes || []).slice();
    var html = list.map(function (o) { return badge(o); }).join("");
    if (result.parse_failed === true && list.indexOf("parse_failure") < 0) html += badge("parse_failure", "parse failure");
    if (result.error && list.indexOf("error") < 0) html += badge("error", "request failed");
    return html;
  }

  function runFields(sample, key, task) {
    var r = sample.runs[key];
    if (!r) return '<p class="sb-muted">This run has no result for this sample.</p>';
    var answer = r.answer === null || r.answer === undefined
      ? '<span class="sb-muted">(no answer)</span>' : foldable(r.answer);
    var prediction = r.prediction_text !== undefined && r.prediction_text !== null ? r.prediction_text : show(r.prediction);
    return fields([
      ["Outcome", outcomeHtml(r)],
      ["Answer", answer],
      ["Reasoning", r.reasoning ? foldable(r.reasoning) : ""],
      ["Prediction", prediction === "" ? '<span class="sb-muted">(empty)</span>' : foldable(prediction)],
      ["Entities", entitiesHtml(r.entities, sample, task)],
      ["Scores", scoresHtml(r.scores, task)],
      ["Error", r.error ? '<span class="sb-text sb-err">' + esc(r.error) + "</span>" : ""],
      ["Diagnostics", keyValues(r.diagnostics, true)],
      ["Judge", keyValues(r.judge, false)],
    ]);
  }

  function runName(key) {
    var run = runByKey[key];
    return run ? run.label + (run.label !== key ? " (" + key + ")" : "") : key;
  }

  function rowHtml(row) {
    var s = row.sample, task = taskByName[s.task] || {};
    var gold = s.gold_text !== undefined && s.gold_text !== null ? s.gold_text : show(s.gold);
    var head = '<div class="sb-row-head"><span class="sb-task">' + esc(s.task) + "</span>" +
      (task.kind ? '<span class="sb-kind">' + esc(task.kind) + "</span>" : "") +
      '<span class="sb-id">' + esc(s.id) + "</span>";
    var shared = fields([["Input", inputHtml(s.input)], ["Gold", gold === "" ? "" : foldable(gold)]]);
    var body;
    if (row.other) {
      body = shared + '<div class="sb-cols">' + [row.run, row.other].map(function (key) {
        return '<div class="sb-col" data-run="' + esc(key) + '"><h3>' + esc(runName(key)) + "</h3>" +
          runFields(s, key, task) + "</div>";
      }).join("") + "</div>";
    } else {
      head += '<span class="sb-run">run: <strong>' + esc(runName(row.run)) + "</strong></span>";
      body = shared + runFields(s, row.run, task);
    }
    return '<li class="sb-row" data-task="' + esc(s.task) + '" data-id="' + esc(s.id) + '" data-run="' +
      esc(row.run) + '"' + (row.other ? ' data-compare="' + esc(row.other) + '"' : "") + ">" + head +
      "</div>" + '<div class="sb-body">' + body + "</div></li>";
  }

  // ---- controls (built once) ----------------------------------------------------------------------

  function options(pairs) {
    return pairs.map(function (p) { return '<option value="' + esc(p[0]) + '">' + esc(p[1]) + "</option>"; }).join("");
  }

  var multiRun = data.runs.length > 1;
  app.innerHTML =
    '<form class="sb-controls" role="search" aria-label="Filter samples" onsubmit="return false">' +
    '<label>Task<select name="task">' + options([["", "all tasks"]].concat(data.tasks.map(function (t) {
      return [t.name, t.name + " (" + taskCounts[t.name] + ")"];
    }))) + "</select></label>" +
    '<label>Run<select name="run">' + options([["", "all runs"]].concat(data.runs.map(function (r) {
      return [r.key, runName(r.key)];
    }))) + "</select></label>" +
    (multiRun ? '<label>Beside it<select name="compare" title="Show another run on the same sample (choose a run first)">' +
      options([["", "no second run"]].concat(data.runs.map(function (r) { return [r.key, runName(r.key)]; }))) +
      "</select></label>" : "") +
    '<label>Outcome<select name="outcome">' + options([["", "any outcome"]].concat(outcomes.map(function (o) {
      return [o, o];
    }))) + "</select></label>" +
    '<label>Parse<select name="parse">' + options([["", "any"], ["failed", "failed to parse"], ["ok", "parsed"]]) +
    "</select></label>" +
    '<label>Search<input type="search" name="q" placeholder="words in input, gold or answers" autocomplete="off"></label>' +
    '<button type="button" class="sb-reset">Clear filters</button>' +
    "</form>" +
    '<div class="sb-status"><span class="sb-count" role="status" aria-live="polite"></span>' +
    '<span class="sb-sample-filter"></span>' +
    '<nav class="sb-pager" aria-label="Sample pages">' +
    '<button type="button" data-go="first">« First</button><button type="button" data-go="prev">‹ Previous</button>' +
    '<span class="sb-page"></span>' +
    '<button type="button" data-go="next">Next ›</button><button type="button" data-go="last">Last »</button></nav>' +
    '<a class="sb-link" href="#samples">Link to this view</a></div>' +
    '<ol class="sb-rows" aria-label="Samples"></ol>';

  var form = app.querySelector("form");
  var list = app.querySelector(".sb-rows");
  var count = app.querySelector(".sb-count");
  var pageLabel = app.querySelector(".sb-page");
  var link = app.querySelector(".sb-link");
  var sampleFilter = app.querySelector(".sb-sample-filter");
  var pages = 1;

  /** Select ``value`` in a <select>, adding an option for a value the data lacks (from a link). */
  function setSelect(select, value) {
    Array.prototype.slice.call(select.querySelectorAll("option[data-extra]")).forEach(function (o) { o.remove(); });
    var known = Array.prototype.some.call(select.options, function (o) { return o.value === value; });
    if (!known) {
      var extra = document.createElement("option");
      extra.value = value;
      extra.textContent = value + " (not in this report)";
      extra.setAttribute("data-extra", "");
      select.appendChild(extra);
    }
    select.value = value;
  }

  function syncControls() {
    ["task", "run", "compare", "outcome", "parse"].forEach(function (name) {
      if (form.elements[name]) setSelect(form.elements[name], state[name]);
    });
    if (form.elements.compare) {
      form.elements.compare.disabled = !state.run;
      Array.prototype.forEach.call(form.elements.compare.options, function (o) {
        o.disabled = !!o.value && o.value === state.run; // a run beside itself shows nothing new
      });
    }
    if (document.activeElement !== form.elements.q) form.elements.q.value = state.q;
    sampleFilter.innerHTML = state.sample
      ? 'sample <strong class="sb-id">' + esc(state.sample) + '</strong> <button type="button" class="sb-unsample">show all samples</button>'
      : "";
  }

  // ---- one render of the list ---------------------------------------------------------------------

  function render() {
    var rows = filteredRows();
    pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
    state.page = Math.min(Math.max(1, state.page), pages);
    var first = (state.page - 1) * PAGE_SIZE;
    var shown = rows.slice(first, first + PAGE_SIZE);
    var unit = compareActive() ? "samples" : (multiRun ? "rows (sample × run)" : "samples");
    count.textContent = rows.length
      ? "Showing " + (first + 1) + "–" + (first + shown.length) + " of " + rows.length + " " + unit
      : "No " + unit + " match these filters";
    pageLabel.textContent = "Page " + state.page + " of " + pages;
    app.querySelector('[data-go="first"]').disabled = app.querySelector('[data-go="prev"]').disabled = state.page <= 1;
    app.querySelector('[data-go="next"]').disabled = app.querySelector('[data-go="last"]').disabled = state.page >= pages;
    link.setAttribute("href", fragment(state));
    list.setAttribute("start", String(first + 1));
    list.innerHTML = shown.length ? shown.map(rowHtml).join("")
      : '<li class="sb-empty">Nothing to show. Clear a filter to see more.</li>';
    syncControls();
  }

  /** A control changed: new state → list, controls and the fragment. */
  function update(changes, keepPage) {
    for (var k in changes) state[k] = changes[k];
    if (!keepPage) state.page = 1;
    render();
    writeHash();
  }

  // ---- events -------------------------------------------------------------------------------------

  form.addEventListener("change", function (event) {
    var name = event.target.name;
    if (!name || name === "q") return;
    var changes = {};
    changes[name] = event.target.value;
    if (name === "run" && (!event.target.value || event.target.value === state.compare)) changes.compare = "";
    update(changes);
  });

  var searchTimer = null;
  form.elements.q.addEventListener("input", function () {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(function () { update({q: form.elements.q.value}); }, 200);
  });
  form.elements.q.addEventListener("keydown", function (event) {
    if (event.key === "Enter") { clearTimeout(searchTimer); update({q: form.elements.q.value}); }
  });

  app.addEventListener("click", function (event) {
    var target = event.target;
    if (target.classList.contains("sb-reset")) { state = emptyState(); update({}); return; }
    if (target.classList.contains("sb-unsample")) { update({sample: ""}); return; }
    if (target.classList.contains("sb-fold-more")) {
      var fold = target.parentNode;
      var open = target.getAttribute("aria-expanded") !== "true";
      fold.querySelector(".sb-fold-short").hidden = open;
      fold.querySelector(".sb-fold-full").hidden = !open;
      target.setAttribute("aria-expanded", String(open));
      target.textContent = open ? "show less" : "show all (" + fold.querySelector(".sb-fold-full").textContent.length + " characters)";
      return;
    }
    var go = target.getAttribute("data-go");
    if (go) {
      state.page = {first: 1, prev: state.page - 1, next: state.page + 1, last: pages}[go];
      update({}, true);
      if (count.getBoundingClientRect().top < 0) count.scrollIntoView();
    }
  });

  function fromHash() {
    var s = stateFromHash();
    if (!s) return false;
    state = s;
    render();
    section.scrollIntoView();
    return true;
  }

  window.addEventListener("hashchange", function () {
    var s = stateFromHash();
    if (s && fragment(s) !== fragment(state)) fromHash(); // our own location.replace() needs no re-render
  });
  if (!fromHash()) render();
})();
