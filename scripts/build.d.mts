/** What a build printed, and how it ended (0: dist/ is built and stamped). */
export interface Built {
  readonly status: number;
  readonly stdout: string;
}

/** Whether dist/ is missing or older than any input of the build. */
export declare const isStale: () => boolean;

/** Compile and stamp dist/. */
export declare const build: () => Promise<Built>;

/** Build when dist/ is stale, one process at a time. */
export declare const ensureBuilt: () => Promise<Built>;
