// A setting an operator gave that Parley cannot start or run a command on:
// the routing file, an environment variable, a command's flags. `parley`
// prints its message alone, without a stack.
export class ConfigError extends Error {}
