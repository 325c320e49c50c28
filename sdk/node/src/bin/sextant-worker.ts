#!/usr/bin/env node
import { main } from '../cli.js';

main(process.argv.slice(2)).then(
  (code) => process.exit(code), // a handler given up on may still hold the event loop: do not wait for it
  (err) => {
    process.stderr.write(`error: ${err?.stack ?? err}\n`);
    process.exit(1);
  },
);
