// Compare page picker: say how many trials are ticked and keep "Compare" disabled outside the allowed
// range (the server says the same with an error; this saves the round trip). No inline script: the
// bounds come from the form's data-min / data-max.
(function () {
  function update(form) {
    const min = parseInt(form.dataset.min, 10);
    const max = parseInt(form.dataset.max, 10);
    const ticked = form.querySelectorAll("input[name=trial]:checked").length;
    const button = form.querySelector("#compare-button");
    const count = form.querySelector("#compare-count");
    if (button) button.disabled = ticked < min || ticked > max;
    if (count) {
      count.textContent = ticked < min ? ticked + " picked: pick at least " + min
        : ticked > max ? ticked + " picked: at most " + max
        : ticked + " picked";
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    const form = document.getElementById("compare-picker");
    if (!form) return;
    form.addEventListener("change", function () { update(form); });
    update(form);
  });
})();
