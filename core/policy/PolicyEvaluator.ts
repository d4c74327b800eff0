/**
 * Compiled evaluation of a policy snapshot: an index built once per snapshot and gate, so a
 * decision looks only at the rules that can match its action, whatever the rule count. The
 * index is built in internal/compile.ts, the guards (stage 6) are internal/guards.ts and the
 * action policy (stage 7) internal/rules.ts.
 */
export type {
  /** A gate compiled for evaluation: its level, tools, scope and per-action rule views. */
  CompiledGate,
  /** Which part of a gate is evaluated: its guards or its action policy. */
  Part,
  /** One gate part's decision: allow, deny or escalate, with its reason code and matched rules. */
  PolicyDecision,
  /** What a decision is asked about: the action, its normalised arguments, who asks, and when. */
  PolicyInput
} from "./internal/evaluation.ts"

export {
  /** Compile every gate of a snapshot, in its gates' `order`. */
  compile,
  /** Compile one gate of a snapshot. */
  compileGate
} from "./internal/compile.ts"

export {
  /** Arguments no rule may allow, whatever the gates. */
  intrinsicRefusal,
  /** Programs that run another program: a command starting with one is refused before any rule. */
  shellWrappers
} from "./internal/guards.ts"

export {
  /** Evaluate one part of one compiled gate. */
  evaluate,
  /** An established invocation that is not the current principal's, or outside its authority scope. */
  invocationRefusal,
  /** A principal or tenant outside the snapshot's scope. */
  scopeRefusal
} from "./internal/rules.ts"
