// sluice-1.js: the dashboard's own behaviour, in a file rather than inline
// handlers, so the Content-Security-Policy can forbid inline script.
//
// [data-copy="<input id>"] on a button copies that input's value and marks
// the button data-copied="true"; [data-select-on-focus] selects an input's
// text when it gets focus. Delegated from the document, so content swapped
// in by htmx works too.
document.addEventListener('click', function (e) {
  var button = e.target.closest('[data-copy]');
  if (!button) return;
  var input = document.getElementById(button.dataset.copy);
  if (!input) return;
  input.select();
  var done = function () {
    button.textContent = 'Copied';
    button.dataset.copied = 'true';
  };
  var fallback = function () {
    document.execCommand('copy');
    done();
  };
  if (navigator.clipboard) {
    navigator.clipboard.writeText(input.value).then(done, fallback);
  } else {
    fallback();
  }
});

document.addEventListener('focusin', function (e) {
  if (e.target.matches('[data-select-on-focus]')) e.target.select();
});
