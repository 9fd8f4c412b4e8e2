/** The upstream broke its protocol or its stream: a failure of the model's server, not the caller. */
export class UpstreamBrokeOff extends Error {}
