// The worker's log: one line per event on stderr, with a level, as the Python worker logs.
export type Level = 'debug' | 'info' | 'warning' | 'error';
const ORDER: Record<Level, number> = { debug: 10, info: 20, warning: 30, error: 40 };

export interface Logger {
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

export function isLevel(text: string): text is Level {
  return text in ORDER;
}

export function logger(level: Level = 'info'): Logger {
  const at = (l: Level) => (message: string) => {
    if (ORDER[l] >= ORDER[level]) process.stderr.write(`${new Date().toISOString()} ${l.toUpperCase()} sextant.worker: ${message}\n`);
  };
  return { debug: at('debug'), info: at('info'), warn: at('warning'), error: at('error') };
}
