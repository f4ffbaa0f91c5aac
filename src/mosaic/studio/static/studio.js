// mosaic studio page: form handling only. Every number comes from the server (the mosaic
// library); charts are plotly figures the server builds with the report's own functions.
(function () {
  "use strict";

  var JOB_FIELDS = [
    ["Model", [
      ["model.source", "model from", "select:model_sources"],
      ["ladder.q", "ladder seed q", "number"],
      ["ladder.experts", "experts E (0: dense)", "number"],
      ["ladder.top_k", "active experts K", "number"],
      ["ladder.split_factor", "split factor G", "number"],
      ["hf.config", "HuggingFace config.json", "textarea"]]],
    ["Cluster", [
      ["hardware.system", "system", "select:systems"],
      ["hardware.nodes", "nodes", "number"],
      ["performance.precision", "precision", "select:precisions"],
      ["performance.quantised_gemms", "GEMMs at that precision", "select:quantised_gemms"]]],
    ["Batch", [
      ["batch.global_seqs", "global batch (seqs)", "number"],
      ["batch.seq_len", "sequence length", "number"],
      ["batch.micro_seqs", "micro-batch (seqs)", "number"],
      // torchtitan's and NeMo AutoModel's local batch: one pipeline schedule per pass
      ["batch.local_seqs", "local batch per pass (seqs; empty: all)", "number"]]],
    ["Layout", [
      ["parallelism.tp", "tensor parallel tp", "number"],
      ["parallelism.pp", "pipeline pp", "number"],
      ["parallelism.vpp", "virtual stages vpp", "number"],
      ["parallelism.cp", "context parallel cp", "number"],
      ["parallelism.ep", "expert parallel ep", "number"],
      ["parallelism.etp", "expert tensor etp", "number"],
      // a layouts row states both, as its search chose them (a row loaded without them
      // predicted another step and memory than the row said: a trial)
      ["parallelism.sequence_parallel", "sequence parallel (with tp > 1)", "select:switches"],
      // the two ways out of a pp·vpp that does not divide the layers, which the error names
      // (a trial found the message pointing at fields the page lacked)
      ["performance.uneven_stages", "uneven pipeline stages", "select:switches"],
      ["parallelism.pipeline_layout", "pipeline layout (Megatron's string; empty: none stated)", "text"],
      ["parallelism.sharding", "sharding", "select:sharding"],
      ["parallelism.hsdp_shard", "HSDP shard group (empty: the job's)", "number"],
      ["performance.stack", "software stack", "select:stacks"]]],
    ["Recompute and optimizer", [
      ["performance.checkpointing", "recompute", "select:checkpointing"],
      ["optimizer.kind", "optimizer", "select:optimizers"]]],
    ["Transformer Engine kernels", [
      ["performance.fused_grouped_mlp", "fused grouped MLP", "select:switches"],
      ["performance.fp8_dot_product_attention", "FP8 attention", "select:switches"]]]
  ];
  var PLAN_FIELDS = [
    ["plan.gpu", "GPU (catalog name)", "text"],
    ["plan.system", "node type (empty: the GPU's default)", "text"],
    ["plan.scale_out_gbps", "what-if scale-out, Gb/s per GPU (empty: the node type's)", "number"],
    ["plan.nodes", "nodes", "number"],
    ["plan.days", "window (days; empty: 20, or set by a USD budget; with one, the shorter)", "number"],
    ["plan.goodput", "goodput (empty: 1, or Young-Daly from the MTBF)", "number"],
    // `mosaic plan --global-batch`: N, or searched with the layout under the batch rule
    ["plan.global_batch", "global batch (seqs): N, MIN:MAX or auto (searched)", "text"],
    ["plan.batch_rule", "batch rule of a searched batch (deepseek, kaplan, tokens:N; empty: deepseek)", "text"],
    ["plan.seq_len", "sequence length", "number"],
    ["plan.grid", "grid (the paper's ladder, or variants of the model above)", "select:grids"],
    ["plan.layers", "depths L (empty: the model's)", "text"],
    ["plan.d_model", "widths d (empty: the model's)", "text"],
    ["plan.q", "ladder seeds q", "text"], ["plan.experts", "experts E", "text"],
    ["plan.top_k", "active experts K", "text"], ["plan.split_factor", "split factors G", "text"],
    ["plan.tpp", "tokens per N_act MIN:MAX", "text"], ["plan.s_min", "sparsity floor", "number"],
    ["plan.stack", "software stack", "select:stacks"],
    ["plan.precision", "precision", "select:plan_precisions"],
    ["plan.quantised_gemms", "GEMMs at that precision", "select:quantised_gemms"],
    ["plan.optimizer", "optimizer", "select:optimizers"],
    ["plan.optimizer_dtype", "optimizer state dtype", "select:optimizer_dtypes"],
    ["plan.stack_version", "stack release YY.MM (empty: none)", "text"],
    ["plan.dispatcher", "EP dispatcher (empty: the stack's)", "text"],
    ["plan.memory_fraction", "usable memory fraction (empty: the stack's)", "number"],
    ["plan.price_per_gpu_hour", "price per GPU-hour, USD (adds the cost)", "number"],
    ["plan.budget_usd", "budget, USD (sets the window, or days where shorter; needs the price)", "number"],
    ["plan.mtbf_gpu_hours", "MTBF per GPU, hours (Young-Daly)", "number"],
    ["plan.checkpoint_s", "checkpoint write, s (Young-Daly)", "number"],
    ["plan.checkpoint_interval_s", "checkpoint every, s (Young-Daly; empty: the optimal interval)", "number"],
    ["plan.restart_s", "restart, s (Young-Daly)", "number"],
    ["plan.max_total_params", "cap on N_tot (e.g. 300B)", "text"],
    ["plan.max_active_params", "cap on N_act (e.g. 12B)", "text"],
    ["plan.unique_tokens", "unique data tokens (e.g. 5T)", "text"],
    ["plan.pp", "pipeline degrees pp (e.g. 1)", "text"], ["plan.ep", "expert degrees ep", "text"],
    ["plan.sharding", "sharding modes (e.g. fsdp)", "text"]
  ];

  var options = null;
  var sequence = 0;
  var pinned = null;
  var pollTimer = null;
  // the job form each panel's shown result was computed for (null: none shown yet)
  var searchedForm = null, explainedForm = null;
  // the job form and target of the export shown (null: none shown)
  var exportedForm = null, exportedTarget = null;
  // the A and B of the comparison shown (null: none shown)
  var comparedPin = null, comparedForm = null;

  function $(id) { return document.getElementById(id); }
  function fieldId(key) { return "f-" + key.replace(/\./g, "-"); }
  function errorId(key) { return "err-" + key.replace(/\./g, "-"); }

  function post(url, payload) {
    return fetch(url, {method: "POST", headers: {"Content-Type": "application/json"},
                       body: JSON.stringify(payload)})
      .then(function (response) {
        return response.json().then(function (body) { body.status = response.status; return body; });
      });
  }

  function buildField(form, key, label, kind, values) {
    var row = document.createElement("div");
    row.className = "field";
    row.setAttribute("data-field", key);
    var lab = document.createElement("label");
    lab.textContent = label;
    lab.htmlFor = fieldId(key);
    var input;
    if (kind.indexOf("select:") === 0) {
      input = document.createElement("select");
      (options[kind.slice(7)] || []).forEach(function (choice) {
        var opt = document.createElement("option");
        // an empty choice leaves the setting to the job file, else the stack's recipe (a
        // switch) or the schema's default (options.empty_choices says which)
        opt.value = choice;
        opt.textContent = choice === "" ? (options.empty_choices || {})[kind.slice(7)] || "(job's)" : choice;
        input.appendChild(opt);
      });
    } else if (kind === "textarea") {
      input = document.createElement("textarea");
      input.placeholder = "paste a config.json (Llama, Mixtral, Qwen, DeepSeek, gpt-oss)";
    } else {
      input = document.createElement("input");
      input.type = "text";
      if (kind === "number") { input.inputMode = "decimal"; }
    }
    input.id = fieldId(key);
    input.name = key;
    if (values[key] !== undefined) { input.value = values[key]; }
    var err = document.createElement("div");
    err.className = "field-error";
    err.id = errorId(key);
    row.appendChild(lab); row.appendChild(input); row.appendChild(err);
    form.appendChild(row);
  }

  function buildForms() {
    var form = $("job-form");
    JOB_FIELDS.forEach(function (group) {
      var fieldset = document.createElement("fieldset");
      var legend = document.createElement("legend");
      legend.textContent = group[0];
      fieldset.appendChild(legend);
      group[1].forEach(function (f) { buildField(fieldset, f[0], f[1], f[2], options.form); });
      form.appendChild(fieldset);
    });
    var plan = $("plan-form");
    PLAN_FIELDS.forEach(function (f) { buildField(plan, f[0], f[1], f[2], options.plan_form); });
    var target = $("export-target");
    (options.export_targets || []).forEach(function (name) {
      var opt = document.createElement("option");
      opt.value = name; opt.textContent = name + " launch config";
      target.appendChild(opt);
    });
  }

  function readForm(formId) {
    var values = {};
    Array.prototype.forEach.call($(formId).querySelectorAll("[name]"), function (input) {
      values[input.name] = input.value;
    });
    return values;
  }

  function showModelFields() {
    var source = $(fieldId("model.source")).value;
    Array.prototype.forEach.call(document.querySelectorAll("#job-form .field"), function (row) {
      var key = row.getAttribute("data-field");
      if (key.indexOf("ladder.") === 0) { row.hidden = source !== "ladder"; }
      if (key === "hf.config") { row.hidden = source !== "hf"; }
    });
  }

  // The plan's grid: the ladder's axes (q), or the model's (depth, width); E, K and G
  // serve both, and an empty one keeps the model's own value (`mosaic plan --backbone`).
  var LADDER_ONLY = ["plan.q"], MODEL_ONLY = ["plan.layers", "plan.d_model"];
  var SHARED_AXES = ["plan.experts", "plan.top_k", "plan.split_factor"];

  function showPlanGrid(switched) {
    var grid = $(fieldId("plan.grid")).value;
    Array.prototype.forEach.call(document.querySelectorAll("#plan-form .field"), function (row) {
      var key = row.getAttribute("data-field");
      if (LADDER_ONLY.indexOf(key) >= 0) { row.hidden = grid !== "ladder"; }
      if (MODEL_ONLY.indexOf(key) >= 0) { row.hidden = grid !== "model"; }
    });
    if (!switched) { return; }
    SHARED_AXES.forEach(function (key) {  // the ladder's lists are no default for a model
      var input = $(fieldId(key)), ladder = options.plan_form[key];
      if (grid === "model" && input.value === ladder) { input.value = ""; }
      if (grid === "ladder" && input.value === "") { input.value = ladder; }
      input.placeholder = grid === "model" ? "the model's own" : "";
    });
  }

  function clearErrors(formId, generalId) {
    Array.prototype.forEach.call($(formId).querySelectorAll(".field"), function (row) {
      row.classList.remove("invalid");
      row.querySelector(".field-error").textContent = "";
      var input = row.querySelector("[name]");
      if (input) { input.removeAttribute("aria-invalid"); input.removeAttribute("aria-describedby"); }
    });
    if (generalId) { $(generalId).textContent = ""; }
  }

  function showErrors(errors, formId, generalId) {
    Object.keys(errors || {}).forEach(function (key) {
      var box = $(errorId(key));
      if (box && $(formId).contains(box)) {
        box.textContent = errors[key];
        box.parentNode.classList.add("invalid");
        var input = $(fieldId(key));  // screen readers announce the field as invalid, with why
        if (input) { input.setAttribute("aria-invalid", "true"); input.setAttribute("aria-describedby", box.id); }
      } else if (generalId) {
        $(generalId).textContent = errors[key];
      }
    });
  }

  // the CLI's digit grouping (1,629,550) and decimal point, whatever the browser's locale:
  // under a German one the page read "763.684 (2.983)" tokens/s beside "11.55%", and a plan's
  // 130.208 days as "130,208" (a trial)
  function fmt(value, digits) { return Number(value).toLocaleString("en-US", {maximumFractionDigits: digits}); }
  function pct(value, digits) { return (100 * value).toFixed(digits === undefined ? 2 : digits) + "%"; }
  function si(value) {
    var units = [[1e12, " T"], [1e9, " B"], [1e6, " M"], [1e3, " k"]];
    for (var i = 0; i < units.length; i++) {
      if (Math.abs(value) >= units[i][0]) { return (value / units[i][0]).toPrecision(3) + units[i][1]; }
    }
    return String(value);
  }

  // the toolbar keeps the few buttons a reader uses: a full one covered the charts' titles
  // at desktop widths (a trial); on a phone the report's figures.js puts legends under the
  // plot (report.css hides the toolbar there)
  var MODEBAR_REMOVED = ["select2d", "lasso2d", "zoomIn2d", "zoomOut2d", "autoScale2d"];
  function draw(id, figure) {
    Plotly.react(id, figure.data, figure.layout, {displaylogo: false, responsive: true,
                                                  modeBarButtonsToRemove: MODEBAR_REMOVED})
      .then(function (plot) {
        if (window.mosaicFigures && window.innerWidth < window.mosaicFigures.narrowPx) {
          window.mosaicFigures.adapt(plot);
        }
      });
  }

  function predict() {
    var mine = ++sequence;
    var form = readForm("job-form");
    return post("/api/perf", {form: form}).then(function (body) {
      if (mine !== sequence) { return; }  // a newer edit is on its way
      clearErrors("job-form", "general-error");
      document.body.setAttribute("data-perf-state", body.ok ? "ok" : "error");
      $("job-charts").classList.toggle("stale", !body.ok);
      $("metrics").classList.toggle("stale", !body.ok);
      if (!body.ok) {  // the last good result stays, greyed out (.stale), until the form is valid
        showErrors(body.errors, "job-form", "general-error");
        return;
      }
      // a panel's error about an earlier, invalid job is gone once the job is valid again
      // (a trial saw Explain's and Export's errors stay after the fix)
      ["layouts-error", "explain-error", "export-error"].forEach(function (id) { $(id).textContent = ""; });
      var p = body.prediction;
      $("m-step").textContent = p.step_time_s.toFixed(4) + " s";
      $("m-tokens").textContent = fmt(p.tokens_per_s, 0) + " (" + fmt(p.tokens_per_s_per_gpu, 0) + ")";
      $("m-mfu").textContent = pct(p.mfu) + " (with attention " + pct(p.mfu_with_attention) + ", HFU " + pct(p.hfu) + ")";
      // against the usable share of the device, as the CLI's perf.headroom.memory_fit_text
      var usable = p.usable_memory_fraction * p.memory_capacity_gib;
      $("m-memory").textContent = p.memory_gib.toFixed(2) + " of " + usable.toFixed(1) + " GiB usable (" +
        Math.round(p.usable_memory_fraction * 100) + "% of " + p.memory_capacity_gib.toFixed(1) + " GiB)" +
        // a calibration fitted on a team's runs scales the memory model (calibrate --fit-memory)
        (p.memory_scale && p.memory_scale !== 1 ? "; memory x" + p.memory_scale + ", the calibration's scale" : "");
      var verdict = $("m-verdict");
      if (p.feasible) {
        verdict.textContent = "fits in memory";
        verdict.className = "ok";
      } else {
        // the CLI's verdict (out of memory, or only over the planning headroom)
        verdict.textContent = "infeasible: " + (p.memory_fit || ("over the usable memory by " +
          p.overshoot_gib.toFixed(2) + " GiB"));
        verdict.className = "bad";
      }
      var m = body.model;
      $("m-model").textContent = m.layers + " layers, d=" + m.d_model + ", N_tot " + si(m.n_total) +
        ", N_act " + si(m.n_active) + " (non-embedding)" + (m.experts ? ", E=" + m.experts + " K=" + m.top_k : ", dense");
      // the EP dispatcher the prediction costed, a job file's or the stack's (a trial found
      // it nowhere on the page)
      $("m-layout").textContent = body.layout + " on " + p.hardware.devices + " × " + p.hardware.system +
        (p.plan.ep > 1 && p.dispatcher ? "; EP dispatcher " + p.dispatcher : "");
      // one line per part, as the report's rows (a trial read one run-on paragraph)
      $("m-coverage").textContent = ["calibration " + p.calibration].concat(
        (p.coverage_summary || []).map(function (row) { return row[0] + ": " + row[1]; })).join("\n");
      $("m-latency").textContent = "predicted in " + body.predict_ms.toFixed(1) + " ms (server, with charts " +
        body.total_ms.toFixed(1) + " ms)";
      draw("chart-step", body.figures.step);
      draw("chart-memory", body.figures.memory);
    }, function (err) {
      // no answer (the studio server stopped): the result shown is not of this form, so it
      // is greyed, and the line says why; it read "request failed: TypeError: Failed to
      // fetch" above the earlier job's numbers in full colour (a trial). A newer edit's
      // request answers for the form; a failure while drawing stays a console error.
      if (mine !== sequence) { return; }
      document.body.setAttribute("data-perf-state", "error");
      $("job-charts").classList.add("stale");
      $("metrics").classList.add("stale");
      lost(null, "general-error")(err);
    });
  }

  var debounce = null;
  function schedulePredict() {
    clearTimeout(debounce);
    debounce = setTimeout(predict, 120);
  }

  // --- layouts --------------------------------------------------------------------------
  function tableHtml(id, columns, rows) {
    var head = columns.map(function (c) { return "<th class='" + (c[3] ? "text" : "") + "'>" + c[1] + "</th>"; }).join("");
    var body = rows.map(function (row, i) {
      return "<tr data-index='" + i + "'>" + columns.map(function (c) {
        var value = row[c[0]];
        var shown = c[2] ? c[2](value, row) : (value === null || value === undefined ? "–" : String(value));
        var sort = typeof value === "number" ? value : "";
        return "<td data-value='" + sort + "' class='" + (c[3] ? "text" : "") + "'>" + escapeHtml(shown) + "</td>";
      }).join("") + "</tr>";
    }).join("");
    return "<div class='scroll'><table id='" + id + "' class='data sortable'><thead><tr>" + head +
           "</tr></thead><tbody>" + body + "</tbody></table></div>";
  }

  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;"}[c];
    });
  }

  // a layout's sharding as the CLI spells it, HSDP with its shard group ('hsdp/8',
  // report.plan_report.sharding_text): rows of shard groups 8, 4 and 2 all read 'hsdp', with
  // different memory (a trial)
  function shardingText(row) {
    return row.sharding === "hsdp" && row.hsdp_shard ? "hsdp/" + row.hsdp_shard : String(row.sharding);
  }

  var LAYOUT_COLUMNS = [["rank", "#"], ["tp", "tp"], ["pp", "pp"], ["vpp", "vpp"], ["cp", "cp"],
    ["ep", "ep"], ["etp", "etp"], ["dp", "dp"], ["sharding", "sharding", function (v, row) { return shardingText(row); }, true],
    ["micro_batch", "mbs"], ["checkpointing", "ckpt", null, true],
    ["tokens_per_s_per_gpu", "tok/s/GPU", function (v) { return fmt(v, 0); }],
    ["mfu", "MFU", function (v) { return pct(v); }],
    ["step_time_s", "step s", function (v) { return v.toFixed(3); }],
    ["memory_gib", "GiB", function (v) { return v.toFixed(1); }]];

  // a request that never got an answer (the server stopped, the network dropped): the panel
  // says so instead of "searching…" forever (a trial stopped the server with the page open)
  // (the request's own failure only: an error while showing a result stays a console error,
  // not a "server gone" message; a review)
  function lost(summaryId, errorId) {
    return function (err) {
      if (summaryId) { $(summaryId).textContent = ""; }
      var unreachable = err instanceof TypeError && /fetch/i.test(err.message);
      $(errorId).textContent = "request failed" +
        (unreachable ? " (is `mosaic studio` still running?)" : "") + ": " + err;
    };
  }

  // a refusal's messages for one line, each once: a rule on two fields is sent beside both
  // (etp and ep, the nodes and the micro-batch), and the panels said it twice (a review)
  function messages(errors) {
    var seen = [];
    Object.keys(errors).forEach(function (k) {
      if (seen.indexOf(errors[k]) < 0) { seen.push(errors[k]); }
    });
    return seen.join("; ");
  }

  // a panel's request refused: its summary cleared, every error message in its error line
  function failed(body, summaryId, errorId) {
    if (body.ok) { return false; }
    $(summaryId).textContent = "";
    $(errorId).textContent = messages(body.errors);
    return true;
  }

  function editedSince(form, ignored) {  // the job fields edited since `form`, by name
    if (!form) { return []; }
    return changedFields(form, readForm("job-form")).map(function (c) { return c.field; })
      .filter(function (key) { return ignored.indexOf(key) < 0; });
  }

  // A panel's result of the job before an edit is greyed and says so (for the layouts, an
  // edit of a field no row sets: options.layout_searched_fields). A trial searched 512 GPUs,
  // set 256, and a click on the dp256 row loaded dp128, another step time than the row's,
  // without a word; the next search or explain is of the edited job.
  function markStale() {
    var layouts = editedSince(searchedForm, options.layout_searched_fields);
    ["layouts-table-holder", "infeasible-holder"].forEach(function (id) {
      $(id).classList.toggle("stale", layouts.length > 0);
    });
    $("layouts-stale").textContent = layouts.length ? "These layouts are of the job before your edit of " +
      layouts.join(", ") + ": search again to list the edited job's." : "";
    var explained = editedSince(explainedForm, []);
    ["explain-figure", "levers-table-holder", "explain-gap"].forEach(function (id) {
      $(id).classList.toggle("stale", explained.length > 0);
    });
    $("explain-stale").textContent = explained.length ? "This explains the job before your edit of " +
      explained.join(", ") + ": explain again for the edited job." : "";
    // the export shown is a file of the job it was made from: after an edit (or another
    // format picked) it is greyed and its download goes (a trial downloaded micro_seqs 2
    // after setting 1, and after a refused export the last good file stayed offered)
    // the comparison shown is of the B it was asked for and the A then pinned: after an edit
    // (or another A pinned) it is greyed and says so, its B no longer the current job (a
    // trial read the earlier B's numbers under "Compare A with current job (B)")
    var compared = editedSince(comparedForm, []);
    var repinned = comparedForm !== null && pinned !== comparedPin;
    if (comparedForm !== null) {
      COMPARED.forEach(function (id) { $(id).classList.toggle("stale", compared.length > 0 || repinned); });
    }
    $("compare-stale").textContent = compared.length ? "This compares A with the job before your edit of " +
      compared.join(", ") + ": compare again for the edited job." :
      repinned ? "This compares the A pinned before: compare again for the new A." : "";
    var exported = editedSince(exportedForm, []);
    var retargeted = exportedForm !== null && $("export-target").value !== exportedTarget;
    $("export-text").classList.toggle("stale", exported.length > 0 || retargeted);
    $("export-download").hidden = exportedForm === null || exported.length > 0 || retargeted;
    $("export-stale").textContent = exported.length || retargeted ? "This export is of the job " +
      (exported.length ? "before your edit of " + exported.join(", ") : "in another format") +
      ": export again to download the edited job." : "";
  }

  function searchLayouts() {
    $("layouts-error").textContent = "";
    $("layouts-summary").textContent = "searching…";
    var form = readForm("job-form");
    return post("/api/layouts", {form: form}).then(function (body) {
      if (failed(body, "layouts-summary", "layouts-error")) { return; }
      searchedForm = form;
      markStale();
      $("layouts-summary").textContent = fmt(body.n_candidates, 0) + " candidates, " +
        fmt(body.n_plans, 0) + " pass the divisibility rules, " + fmt(body.n_feasible, 0) +
        " fit in memory (" + body.search_ms.toFixed(0) + " ms); best " + body.rows.length + " listed.";
      $("layouts-table-holder").innerHTML = tableHtml("layouts-table", LAYOUT_COLUMNS, body.rows);
      var rows = $("layouts-table").tBodies[0].rows;
      Array.prototype.forEach.call(rows, function (tr, i) {
        var load = function () { useLayout(body.rows[Number(tr.getAttribute("data-index"))]); };
        // reachable by keyboard: Enter or Space loads the layout; the table is one tab stop
        // (rowStop), the arrow keys move between its rows
        tr.tabIndex = i === 0 ? 0 : -1;
        tr.setAttribute("title", "load this layout into the editor");
        tr.addEventListener("click", load);
        tr.addEventListener("focus", function () { rowStop(tr); });
        tr.addEventListener("keydown", function (event) {
          if (event.key === "Enter" || event.key === " ") { event.preventDefault(); load(); }
          var step = {ArrowDown: 1, ArrowUp: -1}[event.key];
          var shown = visibleRows($("layouts-table"));
          var next = step ? shown[shown.indexOf(tr) + step] :
            event.key === "Home" ? shown[0] : event.key === "End" ? shown[shown.length - 1] : null;
          if (next) { event.preventDefault(); next.focus(); }
        });
      });
      var infeasible = (body.infeasible.rejected || []).map(function (r) {
        return {layout: fmt(r.plans, 0) + " layouts break a divisibility rule", reason: r.example};
      });
      (body.infeasible.out_of_memory_plans || []).forEach(function (r) {
        infeasible.push({layout: "tp" + r.tp + " pp" + r.pp + " vpp" + r.vpp + " cp" + r.cp + " ep" + r.ep +
          " etp" + r.etp + " dp" + r.dp + " mb" + r.micro_batch + " " + shardingText(r) + " " + r.checkpointing,
          reason: r.reason});
      });
      (body.infeasible.rejected_plans || []).forEach(function (r) {
        infeasible.push({layout: "tp" + r.tp + " pp" + r.pp + " vpp" + r.vpp + " cp" + r.cp + " ep" + r.ep +
          " etp" + r.etp + " dp" + r.dp + " mb" + r.micro_batch + " " + shardingText(r) + " " + r.checkpointing,
          reason: r.reason});
      });
      $("infeasible-holder").innerHTML = tableHtml("infeasible-table",
        [["layout", "layout", null, true], ["reason", "reason", null, true]], infeasible);
      window.mosaicTables.init(document);
      var filter = document.querySelector("input[data-filter-for='layouts-table']");
      if (filter.value) { filter.dispatchEvent(new Event("input")); }
    }, lost("layouts-summary", "layouts-error"));
  }

  // The layouts table is one tab stop, its focused (else first shown) row: every row one
  // stop, a trial's keyboard pass tabbed through 200 rows between Search and Explain
  function visibleRows(table) {
    return Array.prototype.filter.call(table.tBodies[0].rows, function (tr) {
      return tr.style.display !== "none";
    });
  }

  function rowStop(row) {
    Array.prototype.forEach.call(row.parentNode.rows, function (tr) {
      tr.tabIndex = tr === row ? 0 : -1;
    });
  }

  function keepRowStopShown() {  // a filter that hides the stop moves it to a shown row
    var table = $("layouts-table");
    if (!table) { return; }
    var shown = visibleRows(table);
    var stop = table.querySelector("tbody tr[tabindex='0']");
    if (shown.length && shown.indexOf(stop) < 0) { rowStop(shown[0]); }
  }

  function useLayout(row) {
    // a row of another job's search would load its degrees into this job: another dp,
    // another step time than the row says
    var edited = editedSince(searchedForm, options.layout_searched_fields);
    if (edited.length) {
      $("layouts-error").textContent = "Not loaded: this row is of the job before your edit of " +
        edited.join(", ") + "; search again.";
      return;
    }
    $("layouts-error").textContent = "";
    ["tp", "pp", "vpp", "cp", "ep", "etp"].forEach(function (k) { $(fieldId("parallelism." + k)).value = row[k]; });
    // the search chose its own split for the row's pp and vpp: a stated one would not fit it
    $(fieldId("parallelism.pipeline_layout")).value = "";
    $(fieldId("parallelism.sharding")).value = row.sharding;
    // the search's own choices of the row (sequence parallelism only means something with
    // tp > 1; the shard group only with HSDP): empty otherwise, the job's
    $(fieldId("parallelism.sequence_parallel")).value = row.tp > 1 ? String(row.sequence_parallel) : "";
    $(fieldId("parallelism.hsdp_shard")).value = row.sharding === "hsdp" ? String(row.hsdp_shard) : "";
    $(fieldId("batch.micro_seqs")).value = row.micro_batch;
    $(fieldId("performance.checkpointing")).value = row.checkpointing;
    markStale();
    predict();
    location.hash = "#job";
  }

  // --- explain ----------------------------------------------------------------------------
  var LEVER_COLUMNS = [["rank", "#"], ["description", "what changes", null, true],
    ["mfu", "MFU", function (v) { return v === null ? "–" : pct(v); }],
    ["step_time_s", "step s", function (v) { return v === null ? "–" : v.toFixed(3); }],
    ["gain", "gain", function (v) { return v === null ? "–" : v.toFixed(2) + "x"; }],
    ["memory_gib", "GiB", function (v) { return v === null ? "–" : v.toFixed(1); }],
    ["verdict", "feasible?", null, true],
    ["set", "fields it sets", null, true]];

  // a run record's measured-vs-predicted gap, the rows and findings `mosaic explain` prints
  // (the server computes them); a record edited into a what-if says why there is none
  function showGap(gap, note) {
    $("explain-gap").hidden = !gap;
    // the report's key-value table (page.key_value_html): words left-aligned
    $("gap-table-holder").innerHTML = gap ? "<table id='gap-table' class='data kv'><tbody>" +
      gap.rows.map(function (row) {
        return "<tr><td class='text'>" + escapeHtml(row[0]) + "</td><td class='text'>" +
          escapeHtml(row[1]) + "</td></tr>";
      }).join("") + "</tbody></table>" : "";
    $("gap-findings").innerHTML = gap ? gap.findings.map(function (finding) {
      return "<li>" + escapeHtml(finding) + "</li>";
    }).join("") : "";
    $("explain-gap-note").hidden = !note;
    $("explain-gap-note").textContent = note || "";
  }

  function explainJob() {
    $("explain-error").textContent = "";
    $("explain-summary").textContent = "explaining…";
    var form = readForm("job-form");
    return post("/api/explain", {form: form}).then(function (body) {
      if (failed(body, "explain-summary", "explain-error")) { return; }
      explainedForm = form;
      markStale();
      // the bound and which levers make it fit are two sentences (they ran on: "... of the
      // step The job does not fit")
      $("explain-summary").textContent = "Bound: " + body.bound + (body.fit ? ". " + body.fit : "");
      var rows = body.levers.map(function (lever, i) {
        return Object.assign({}, lever, {rank: i + 1,
          verdict: lever.feasible ? "yes" : "no: " + lever.reason,
          set: (lever.overrides || []).join(" ")});
      });
      showGap(body.gap, body.gap_note);
      $("explain-figure").hidden = false;
      draw("chart-levers", body.figure);
      $("levers-table-holder").innerHTML = tableHtml("levers-table", LEVER_COLUMNS, rows);
      window.mosaicTables.init(document);
    }, lost("explain-summary", "explain-error"));
  }

  // --- compare ----------------------------------------------------------------------------
  function pin() {
    // an edit within the prediction's debounce was pinned beside the result of the job
    // before it (a trial: "A pinned: ... mb4" for an mb1 form, or an invalid ep 5 pinned
    // under the last valid job's numbers): the form is predicted first, then pinned
    clearTimeout(debounce);
    return predict().then(pinPredicted);
  }

  function pinPredicted() {
    // the shown result is the last valid job's while the form is invalid (greyed): pinning
    // then would describe one job and compare another (a trial)
    if ($("metrics").classList.contains("stale")) {
      $("pin-note").textContent = "Fix the job's fields first: A is pinned from a valid job.";
      return;
    }
    pinned = readForm("job-form");
    $("compare-run").disabled = false;
    $("pin-note").textContent = "A pinned: " + $("m-layout").textContent + ", " + $("m-step").textContent;
    markStale();
  }

  function changedFields(a, b) {  // the form fields whose values differ, A then B
    var keys = Object.keys(a).concat(Object.keys(b).filter(function (k) { return !(k in a); }));
    return keys.filter(function (k) { return a[k] !== b[k]; }).map(function (k) {
      return {field: k, a: a[k] === undefined ? "" : a[k], b: b[k] === undefined ? "" : b[k]};
    });
  }

  // a long input (a pasted config.json) shown by its start and length: whole, it filled
  // the comparison's table of changes (a trial)
  var SHOWN_CHARS = 100;
  function shortened(value) {
    var text = String(value);
    return text.length <= SHOWN_CHARS ? text : text.slice(0, SHOWN_CHARS) + "… (" +
      text.length.toLocaleString("en-US") + " characters)";
  }

  // the comparison shown: its changes, its numbers and its charts
  var COMPARED = ["compare-changes-holder", "compare-table-holder", "compare-charts"];

  function compare() {
    $("compare-error").textContent = "";
    var current = readForm("job-form"), pinnedA = pinned;
    // a refused comparison leaves the last one greyed, its changes with its numbers: the
    // refused B's changes were listed above the numbers of the B before it (a trial)
    var refused = function () {
      COMPARED.forEach(function (id) { $(id).classList.add("stale"); });
    };
    return post("/api/compare", {forms: [pinnedA, current]}).then(function (body) {
      if (!body.ok) {
        refused();
        $("compare-error").textContent = "A or B is not a valid job: " +
          messages(body.errors);
        return;
      }
      comparedPin = pinnedA;
      comparedForm = current;
      COMPARED.forEach(function (id) { $(id).classList.remove("stale"); });
      markStale();
      var changes = changedFields(pinnedA, current);
      $("compare-changes-holder").innerHTML = changes.length ? tableHtml("compare-changes",
        [["field", "input changed", null, true], ["a", "A", shortened, true], ["b", "B", shortened, true]],
        changes)
        : "<p class='note'>No input differs: A and B are the same job.</p>";
      var rows = [["step time (s)", "step_time_s", 4], ["tokens/s per GPU", "tokens_per_s_per_gpu", 0],
                  ["MFU", "mfu", -1], ["memory (GiB)", "memory_gib", 2]].map(function (r) {
        var a = body.predictions[0][r[1]], b = body.predictions[1][r[1]];
        // the CLI's grouping (4,414) and a signed change (+4.2%), as `mosaic compare` prints
        var show = function (v) {
          return r[2] < 0 ? pct(v) : Number(v).toLocaleString("en-US", {
            minimumFractionDigits: r[2], maximumFractionDigits: r[2]});
        };
        var change = (b - a) / a;
        return {quantity: r[0], a: show(a), b: show(b), change: (change >= 0 ? "+" : "") + pct(change, 1)};
      });
      // each side's memory verdict on its own GPU (a trial's B was out of memory on another
      // GPU, with no row saying so)
      var verdict = function (p) {
        return p.feasible ? "fits" : (p.memory_fit || "does not fit");
      };
      rows.push({quantity: "fits in memory?", a: verdict(body.predictions[0]),
                 b: verdict(body.predictions[1]), change: ""});
      $("compare-table-holder").innerHTML = tableHtml("compare-table",
        [["quantity", "", null, true], ["a", "A"], ["b", "B"], ["change", "B vs A"]], rows);
      $("compare-charts").hidden = false;
      draw("chart-compare-step", body.figures.step);
      draw("chart-compare-memory", body.figures.memory);
    }, function (err) { refused(); lost(null, "compare-error")(err); });
  }

  // --- plan -------------------------------------------------------------------------------
  // the plan error line holds the refusal of a request made while another plan ran (409):
  // it is gone once that plan is (a trial read "plan 1 is still running" under "plan 1:
  // cancelled")
  var busyRefusal = false;

  function runPlan() {
    clearErrors("plan-form", "plan-error");
    busyRefusal = false;
    // the request's own state at once: the previous plan's ("plan 1: done", its progress,
    // message and report link) stayed until the request returned (a trial)
    resetPlanStatus("starting", "starting…");
    // the editor's model goes along: a model grid plans around it
    return post("/api/plan", {form: readForm("plan-form"), job: readForm("job-form")}).then(function (body) {
      if (!body.ok) {
        showErrors(body.errors, "plan-form", "plan-error");
        if (body.status === 409) { busyRefusal = true; pollPlan(); return; }  // busy: the running plan's state
        planRefused();
        return;
      }
      $("plan-report-link").hidden = true;
      pollPlan();
    }, lost(null, "plan-error"));
  }

  // a refused request starts no plan: the status line, progress, message and report link
  // of the previous plan go (a trial read "plan 2: done" under the refusal); it stays in
  // the history table
  function planRefused() {
    resetPlanStatus("refused", "not started: the plan request was refused (why: at the marked field, or above)");
  }

  // the status line says `text` (body data-plan-state `state`), with no progress, message
  // or report link of an earlier plan, and no poll of it pending
  function resetPlanStatus(state, text) {
    clearTimeout(pollTimer);
    $("plan-progress").max = 1;
    $("plan-progress").value = 0;
    $("plan-state").textContent = text;
    $("plan-message").textContent = "";
    $("plan-report-link").hidden = true;
    document.body.setAttribute("data-plan-state", state);
  }

  function pollPlan() {
    clearTimeout(pollTimer);
    fetch("/api/plan/status").then(function (r) { return r.json(); }).then(function (body) {
      var job = body.current;
      if (!job) { return; }
      var running = job.state === "running";
      if (!running && busyRefusal) { $("plan-error").textContent = ""; busyRefusal = false; }
      $("plan-progress").max = Math.max(job.total, 1);
      $("plan-progress").value = job.done;
      $("plan-state").textContent = "plan " + job.id + ": " + job.state + " (" + job.done + "/" + job.total +
        // a searched batch counts each geometry at each candidate batch (as the server's messages)
        (job.batches > 1 ? " geometry-batch pairs, " : " geometries, ") + job.elapsed_s.toFixed(1) + " s)";
      document.body.setAttribute("data-plan-state", job.state);
      $("plan-message").textContent = job.message || "";
      $("plan-run").disabled = running;
      $("plan-cancel").disabled = !running;
      if (job.report_url) {
        $("plan-report-link").href = job.report_url;
        $("plan-report-link").hidden = false;
      }
      renderHistory(body.history);
      if (running) { pollTimer = setTimeout(pollPlan, 400); }
    }, function (err) {  // the run button back, with why (no stuck "running")
      $("plan-state").textContent = "lost contact with the studio server";
      $("plan-run").disabled = false;
      $("plan-cancel").disabled = true;
      lost(null, "plan-error")(err);
    });
  }

  function renderHistory(history) {
    var done = history.filter(function (h) { return h.summary; });
    if (!done.length) { $("plan-history").innerHTML = ""; return; }
    var rows = done.map(function (h) {
      var s = h.summary;
      return {id: h.id, cluster: s.cluster, days: s.days, goodput: s.goodput, goodput_model: s.goodput_model,
              global_batch: s.global_batch, batch_mode: s.batch_mode, batch_rule: s.batch_rule,
              geometry: s.geometry, sparsity: s.sparsity, n_active: s.n_active, tokens: s.tokens, mfu: s.mfu,
              loss: s.loss, report: h.report_url};
    });
    // days to the report's 3 decimals: a USD budget's window read 130.20833333333334 (a trial)
    var columns = [["id", "plan"], ["cluster", "cluster", null, true], ["days", "days", function (v) { return fmt(v, 3); }],
      ["geometry", "optimum", null, true], ["sparsity", "S", function (v) { return v.toFixed(4); }],
      ["n_active", "N_act", si], ["tokens", "tokens", si], ["mfu", "MFU", function (v) { return pct(v, 1); }],
      ["loss", "loss", function (v) { return v.toFixed(5); }], ["report", "report", null, true]];
    // the goodput that scaled each plan's tokens (D = tokens/s x T x goodput, Eq. 25), as
    // `mosaic plan` prints it, where a plan's is not the paper's 1 (as `mosaic sweep` shows
    // it where it differs); a Young-Daly plan showed its tokens with no goodput (a trial)
    if (rows.some(function (r) { return r.goodput !== 1; })) {
      columns.splice(3, 0, ["goodput", "goodput", function (v, row) {
        return v.toFixed(4) + " (" + row.goodput_model + ")";
      }, true]);
    }
    // the optimum's batch where a plan searched it (--global-batch auto or MIN:MAX), as
    // `mosaic plan` ranks it (its B column, before MFU) and prints the optimum's ("searched")
    if (rows.some(function (r) { return r.batch_mode === "search"; })) {
      columns.splice(columns.length - 3, 0, ["global_batch", "B", function (v, row) {
        return row.batch_mode === "search" ? v + " (searched, " + row.batch_rule + ")" : String(v);
      }, true]);
    }
    $("plan-history").innerHTML = tableHtml("plan-history-table", columns, rows);
    Array.prototype.forEach.call($("plan-history-table").tBodies[0].rows, function (tr, i) {
      var cell = tr.cells[tr.cells.length - 1];
      if (rows[i].report) { cell.innerHTML = "<a target='_blank' href='" + rows[i].report + "'>open</a>"; }
    });
    window.mosaicTables.init(document);
  }

  function cancelPlan() {
    return post("/api/plan/cancel", {}).then(pollPlan, lost(null, "plan-error"));
  }

  // --- export -----------------------------------------------------------------------------
  // a refused or failed export offers no file: the last good one stays greyed, with no
  // download (it is not the job asked for)
  function exportRefused() {
    $("export-download").hidden = true;
    $("export-text").classList.add("stale");
  }

  function exportJob() {
    $("export-error").textContent = "";
    $("export-notes").textContent = "";
    var target = $("export-target").value;
    var form = readForm("job-form");
    return post("/api/export", {form: form, target: target}).then(function (body) {
      if (!body.ok) {
        exportRefused();
        $("export-error").textContent = messages(body.errors);
        return;
      }
      exportedForm = form;
      exportedTarget = target;
      var text = body.text;
      // what the target cannot express is a note about a good export, not an error
      $("export-notes").textContent = body.unsupported && body.unsupported.length ?
        "not expressible in " + target + ": " + body.unsupported.join("; ") : "";
      $("export-text").textContent = text;
      var link = $("export-download");
      if (link.href.indexOf("blob:") === 0) { URL.revokeObjectURL(link.href); }  // the earlier file's
      link.href = URL.createObjectURL(new Blob([text], {type: "text/plain"}));
      link.download = body.filename;
      link.textContent = "download " + body.filename;
      markStale();
    }, function (err) { exportRefused(); lost(null, "export-error")(err); });
  }

  // A plan field takes the job editor's value (its cluster, batch, stack) until it is
  // typed in: the plan then searches the cluster the edited job runs on.
  function followJob(event) {
    var key = event.target.name, follows = {};
    Object.keys(options.plan_fields_from_job || {}).forEach(function (planKey) {
      if (options.plan_fields_from_job[planKey] === key) { follows[planKey] = event.target.value; }
    });
    // the node type and its GPU are a pair: either typed keeps both (a review: a typed B200
    // beside a followed DGX-H100 planned neither)
    var typed = function (planKey) { return $(fieldId(planKey)).hasAttribute("data-typed"); };
    if (key === "hardware.system" && !typed("plan.system") && !typed("plan.gpu")) {
      follows["plan.system"] = event.target.value;
      follows["plan.gpu"] = (options.system_gpus || {})[event.target.value] || "";
    }
    Object.keys(follows).forEach(function (planKey) {
      var input = $(fieldId(planKey));
      if (input && !input.hasAttribute("data-typed")) { input.value = follows[planKey]; }
    });
  }

  function start() {
    fetch("/api/options").then(function (r) { return r.json(); }).then(function (body) {
      options = body;
      buildForms();
      showModelFields();
      showPlanGrid(false);
      $(fieldId("plan.grid")).addEventListener("change", function () { showPlanGrid(true); });
      $("job-form").addEventListener("input", schedulePredict);
      $("job-form").addEventListener("input", markStale);
      $("job-form").addEventListener("change", markStale);
      $("job-form").addEventListener("input", followJob);
      $("job-form").addEventListener("change", followJob);
      $("plan-form").addEventListener("input", function (event) {
        event.target.setAttribute("data-typed", "1");  // the user's value: kept
      });
      $("job-form").addEventListener("change", function () { showModelFields(); schedulePredict(); });
      $("layouts-run").addEventListener("click", searchLayouts);
      // (after the table's own filter listener, registered when table.js loaded)
      document.querySelector("input[data-filter-for='layouts-table']").addEventListener(
        "input", keepRowStopShown);
      $("explain-run").addEventListener("click", explainJob);
      $("pin-a").addEventListener("click", pin);
      $("compare-run").addEventListener("click", compare);
      $("plan-run").addEventListener("click", runPlan);
      $("plan-cancel").addEventListener("click", cancelPlan);
      $("export-run").addEventListener("click", exportJob);
      $("export-target").addEventListener("change", markStale);
      document.body.setAttribute("data-ready", "1");
      predict();
      pollPlan();
    });
  }

  start();
})();
