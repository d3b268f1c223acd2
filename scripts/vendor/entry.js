// The one global the twin maps use: window.reglScatterplot = {createScatterplot, createRenderer, ...}.
export { default as createScatterplot, createRenderer, checkSupport } from "regl-scatterplot";
