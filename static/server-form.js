// Show only the fieldset of the chosen transport.
const radios = document.querySelectorAll('input[name="transport"]');
function update() {
  const chosen = document.querySelector('input[name="transport"]:checked')?.value;
  for (const fieldset of document.querySelectorAll("fieldset[data-transport]")) {
    fieldset.hidden = chosen !== undefined && fieldset.dataset.transport !== chosen;
  }
}
radios.forEach((radio) => radio.addEventListener("change", update));
update();
