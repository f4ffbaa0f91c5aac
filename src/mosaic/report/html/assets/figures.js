/* The report's figures on a phone-width screen: legends below the plot instead of beside
   it, smaller panel titles, and multi-panel figures taller so the panels do not crowd each
   other (a reader found titles overlapping and a 40 px plot beside its legend at 420 px).
   The toolbar is hidden by report.css at the same width. */
(function () {
  "use strict";
  var NARROW_PX = 700;

  function adapt(plot) {
    var layout = plot.layout || {};
    var panels = Object.keys(layout).filter(function (key) {
      return /^xaxis\d*$/.test(key);
    }).length;
    // the legend at the figure's bottom edge (yref container), where plotly's margin
    // auto-expansion makes room for it below the axis labels: at y -0.2 of the plot it
    // covered two-line category labels (a trial at 390 px)
    var update = {"legend.orientation": "h", "legend.x": 0, "legend.xanchor": "left",
                  "legend.yref": "container", "legend.y": 0, "legend.yanchor": "bottom",
                  "margin.l": 48, "margin.r": 12};
    (layout.annotations || []).forEach(function (annotation, index) {
      update["annotations[" + index + "].font.size"] = 10;
    });
    shortenCategoryLabels(layout.yaxis, update);
    if (panels <= 1) {
      // the legend now takes height, not width: the plot keeps its own (a trial's ten-entry
      // legend scrolled inside a 130 px plot, its last entry hidden)
      update.height = (layout.height || 450) + LEGEND_ROW_PX * legendEntries(plot);
      setHeight(plot, update.height);
    } else {
      stackPanels(layout, panels, update);
      setHeight(plot, update.height);
    }
    window.Plotly.relayout(plot, update);
  }

  var LEGEND_ROW_PX = 22;
  var NARROW_LABEL_CHARS = 22;  // a category's name beside a phone's horizontal bars

  /* The long category names beside horizontal bars (explain's levers, 60 characters each)
     cut to their start, so the bars keep the width (a trial at 500 px: a 60 px plot, the
     names' ranks cut off the figure's left edge); the hover keeps the whole name. */
  function shortenCategoryLabels(axis, update) {
    var names = (axis || {}).categoryarray;
    if (!Array.isArray(names) || !names.some(function (n) {
      return String(n).length > NARROW_LABEL_CHARS;
    })) { return; }
    update["yaxis.tickmode"] = "array";
    update["yaxis.tickvals"] = names;
    update["yaxis.ticktext"] = names.map(function (n) {
      n = String(n);
      return n.length > NARROW_LABEL_CHARS ? n.slice(0, NARROW_LABEL_CHARS - 1).trim() + "\u2026" : n;
    });
  }  // one horizontal legend row at plotly's default 12 px font

  /* Legend entries the plot shows (a legend group counts once), each taken as a row. */
  function legendEntries(plot) {
    if ((plot.layout || {}).showlegend === false) { return 0; }  // no legend drawn
    var seen = {};
    return (plot.data || []).filter(function (trace) {
      if (trace.showlegend === false) { return false; }
      var key = trace.legendgroup || trace.name;
      if (seen[key]) { return false; }
      seen[key] = true;
      return true;
    }).length;
  }

  /* The plot's div and the wrapper plotly writes around it keep the height they were
     written with (a responsive plot fills its div). */
  function setHeight(plot, heightPx) {
    plot.style.height = heightPx + "px";
    if (plot.parentElement && plot.parentElement.style.height) {
      plot.parentElement.style.height = heightPx + "px";
    }
  }

  /* A grid of subplots (make_subplots: xaxis, xaxis2, ... row by row, one title annotation
     each, in the same order) as one column, each panel a full-width band with its title
     above it. */
  function stackPanels(layout, panels, update) {
    var gap = Math.min(0.25, 0.5 / panels);  // room for rotated category ticks
    update.height = Math.max(layout.height || 450, 300 * panels);
    var titles = (layout.annotations || []).filter(function (a) {
      return a.xref === "paper" && a.yref === "paper" && a.yanchor === "bottom";
    });
    for (var i = 0; i < panels; i += 1) {
      var suffix = i === 0 ? "" : String(i + 1);
      var top = 1 - i / panels;
      var bottom = 1 - (i + 1) / panels + gap;
      update["xaxis" + suffix + ".domain"] = [0, 1];
      update["yaxis" + suffix + ".domain"] = [bottom, top - gap / 3];
      if (titles.length === panels) {
        var index = layout.annotations.indexOf(titles[i]);
        update["annotations[" + index + "].x"] = 0.5;
        update["annotations[" + index + "].y"] = top - gap / 3;
      }
    }
  }

  function adaptAll() {
    if (window.innerWidth >= NARROW_PX || !window.Plotly) { return; }
    Array.prototype.forEach.call(
      document.querySelectorAll("[data-figure] .js-plotly-plot"), adapt);
  }

  /* Printing: a plot is drawn at its box's width in pixels on the screen, so a page printed
     from a window wider than the paper cut every figure at the paper's right edge (legends
     and the right-hand panels lost: a trial at 1400 px). When the print layout applies
     (the print media query matches once the page is laid out at the paper's width) each
     plot is fitted to its box's width again, at once, so the printout has it; and when
     printing ends, to the screen's. */
  function fitWidths() {
    if (!window.Plotly) { return; }
    Array.prototype.forEach.call(
      document.querySelectorAll("[data-figure] .js-plotly-plot"), function (plot) {
        if (!plot.layout) { return; }
        delete plot.layout.width;  // the box decides (plotly's Plots.resize does the same)
        window.Plotly.relayout(plot, {autosize: true});
      });
  }

  var printing = window.matchMedia && window.matchMedia("print");
  if (printing) {
    if (printing.addEventListener) {
      printing.addEventListener("change", fitWidths);
    } else if (printing.addListener) {  // Safari before 14
      printing.addListener(fitWidths);
    }
  }

  // adapt: one plot (the studio draws its charts after load and adapts each)
  window.mosaicFigures = { adapt: adapt, adaptAll: adaptAll, narrowPx: NARROW_PX };
  if (document.readyState === "complete") {
    adaptAll();
  } else {
    window.addEventListener("load", adaptAll);
  }
})();
