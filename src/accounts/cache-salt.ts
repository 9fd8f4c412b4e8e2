// An account's prefix-cache salt. A request that finds its prompt already
// cached is answered sooner and reports cached tokens, so a cache shared by
// every tenant tells one tenant what another has sent: a guess at another
// team's system prompt or document comes back cached when it is right. By
// default a model's cache is kept per account (its `routing.prefixCache`):
// each request to an engine that can keep caches apart carries its account's
// salt (vLLM's and SGLang's `cache_salt`, Parley's own engine's too), and its
// affinity key is the account's, so that each account's prompts have homes
// of their own. Made beside the API keys' HMACs, under the same secret.
import { createHmac } from 'node:crypto';

/**
 * The account's salt: keyed with the server's secret (labelled apart from the API keys' HMACs under it), so that it
 * names no account in an engine's logs and no one without the secret can work out another account's.
 */
export const accountCacheSalt = (secret: string, account: string) => createHmac('sha256', secret).update('prefix-cache\n').update(account).digest('base64url');
