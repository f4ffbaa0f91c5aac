// Sortable, filterable tables for the mosaic report and studio (no dependencies).
// A <table class="sortable"> sorts by a column when its header is clicked, or focused and
// given Enter or Space (numeric cells carry data-value); an <input data-filter-for="TABLE_ID">
// hides the rows that miss any of its whitespace-separated words, each looked for in the
// row's cells (case-insensitively; "zero2 4": a cell holds zero2, one holds 4).
(function () {
  "use strict";

  function cellValue(row, index) {
    var cell = row.cells[index];
    if (!cell) { return ""; }
    var raw = cell.getAttribute("data-value");
    if (raw !== null && raw !== "" && !isNaN(Number(raw))) { return Number(raw); }
    return cell.textContent.trim().toLowerCase();
  }

  function sortBy(table, index, header) {
    var body = table.tBodies[0];
    if (!body) { return; }
    var ascending = header.getAttribute("data-sort") !== "asc";
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, index), y = cellValue(b, index);
      if (typeof x === "number" && typeof y === "number") { return ascending ? x - y : y - x; }
      x = String(x); y = String(y);
      return ascending ? x.localeCompare(y) : y.localeCompare(x);
    });
    rows.forEach(function (row) { body.appendChild(row); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (cell) {
      cell.removeAttribute("data-sort");
      cell.removeAttribute("aria-sort");
    });
    header.setAttribute("data-sort", ascending ? "asc" : "desc");
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  }

  function makeSortable(table) {
    if (!table.tHead || table.getAttribute("data-sortable-ready")) { return; }
    table.setAttribute("data-sortable-ready", "1");
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (header, index) {
      header.addEventListener("click", function () { sortBy(table, index, header); });
      // a header is a control: reachable by Tab, Enter or Space sorts (a trial's keyboard
      // pass could not sort any table)
      header.tabIndex = 0;
      header.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          sortBy(table, index, header);
        }
      });
      header.title = "click (or Enter) to sort";
    });
  }

  function applyFilter(input) {
    var table = document.getElementById(input.getAttribute("data-filter-for"));
    if (!table || !table.tBodies[0]) { return; }
    var terms = input.value.toLowerCase().split(/\s+/).filter(function (t) { return t; });
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
      // the cells apart (a term holds no whitespace, so it cannot span two): the row's text
      // ran them together ("zero24"), and "zero2 4" found nothing (a trial)
      var text = Array.prototype.map.call(row.cells, function (cell) {
        return cell.textContent;
      }).join("\n").toLowerCase();
      row.style.display = terms.every(function (t) { return text.indexOf(t) >= 0; }) ? "" : "none";
    });
  }

  function init(root) {
    root = root || document;
    Array.prototype.forEach.call(root.querySelectorAll("table.sortable"), makeSortable);
    Array.prototype.forEach.call(root.querySelectorAll("input[data-filter-for]"), function (input) {
      if (input.getAttribute("data-filter-ready")) { return; }
      input.setAttribute("data-filter-ready", "1");
      input.addEventListener("input", function () { applyFilter(input); });
    });
  }

  window.mosaicTables = { init: init, sortBy: sortBy };
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { init(document); });
  } else {
    init(document);
  }
})();
