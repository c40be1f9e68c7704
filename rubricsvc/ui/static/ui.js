// Keyboard navigation of tables marked data-keynav: j / k move, Enter opens the row's link.
// The only script of the review pages; everything works without it.
(function () {
  function rows(table) { return Array.from(table.querySelectorAll("tbody tr")); }
  document.addEventListener("keydown", function (event) {
    var target = event.target;
    if (target && /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName)) return;
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    var table = document.querySelector("table[data-keynav]");
    if (!table) return;
    var all = rows(table);
    if (!all.length) return;
    var index = all.findIndex(function (r) { return r.classList.contains("selected"); });
    if (event.key === "j" || event.key === "k") {
      if (index >= 0) all[index].classList.remove("selected");
      index = event.key === "j" ? Math.min(index + 1, all.length - 1) : Math.max(index - 1, 0);
      all[index].classList.add("selected");
      var link = all[index].querySelector("a");
      if (link) link.focus();
      event.preventDefault();
    } else if (event.key === "Enter" && index >= 0 && document.activeElement === document.body) {
      var open = all[index].querySelector("a");
      if (open) open.click();
    }
  });
  // Edit form: a ticked "Remove" greys its row out.
  document.addEventListener("change", function (event) {
    var box = event.target;
    if (box && box.matches && box.matches("input[data-remove]")) {
      box.closest("fieldset").classList.toggle("removed", box.checked);
    }
  });
})();
