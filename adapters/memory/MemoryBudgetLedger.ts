/**
 * The in-memory BudgetLedger: forgotten on restart (SqlBudgetLedger is the durable one). Runtimes: every one.
 */
import type { Layer } from "effect"
import type { BudgetLedger } from "../../core/policy/BudgetLedger.ts"
import { layerMemory, makeMemory } from "../../core/policy/BudgetLedger.ts"

/** A fresh in-memory ledger. */
export const make = makeMemory

/** The in-memory BudgetLedger. */
export const layer: Layer.Layer<BudgetLedger> = layerMemory
