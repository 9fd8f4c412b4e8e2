#!/usr/bin/env -S node --max-semi-space-size=64
// A larger young generation than Node's default: a streamed reply allocates
// some 100 KB of short-lived text, and with 16 MB semi-spaces the scavenger
// ran often enough to cost Parley 5% of its throughput (README, Benchmarks).
// Every launcher (npm start, the quickstart, the image) runs this file as an
// executable, so the flag is set in this one place.
import '../dist/main.js';
