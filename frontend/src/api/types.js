// Shapes of the Sardeenz admin API (camelCase JSON; see docs/api.md and /openapi.json).
export {};
