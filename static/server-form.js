// Show only the fieldset of the chosen transport (one fieldset serves the three remote ones).
const radios = document.querySelectorAll('input[name="transport"]');
function update() {
  const chosen = document.querySelector('input[name="transport"]:checked')?.value;
  for (const fieldset of document.querySelectorAll("fieldset[data-transport]")) {
    fieldset.hidden = chosen !== undefined && !fieldset.dataset.transport.split(" ").includes(chosen);
  }
}
radios.forEach((radio) => radio.addEventListener("change", update));
update();
