// Text that reaches plotly. Plotly draws a few HTML tags found in trace names, titles, tick and hover labels
// (<b>, <br>, <span style=...>, <a href=...>), so any text a person wrote (a run's name, a dataset's answer)
// goes through this one helper before it becomes a label: & < > escaped, drawn as the characters they are.
window.dapoPlotText = (text) => String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
