// A "Copy" button copies the value of the input or textarea its data-copy names (an invite link, a new API
// token, a share link, the Deploy panel's launch lines): the clipboard API, else the selection and
// execCommand("copy"); the button then says "Copied". Without scripts the value stays selectable by hand.
// Loaded by base.html on every board page; delegated from document, so buttons htmx swaps in work too.
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const input = document.querySelector(button.dataset.copy);
  if (!input) return;
  input.select();
  const done = () => { button.textContent = "Copied"; };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(input.value).then(done, () => document.execCommand("copy") && done());
  } else if (document.execCommand("copy")) {
    done();
  }
});
