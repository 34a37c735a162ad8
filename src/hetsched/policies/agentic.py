"""The agentic policy: runtime monitor + decider in a closed loop (PAPER.md's Figure 2).

Each round: the policy relays the monitor's what-if requests (``next_probe``) to the loop,
which executes and records them -> the loop has the monitor observe the history and those
probes (``monitor.observe``) and hands the observations to ``propose`` ->
the decider reads the scenario (cards unless cold start) and the observations -> its mapping
is validated (chat deciders re-ask with the error, up to their attempt limit) -> if no valid
mapping came back, or the planner's noise-free run of it deadlocks at the head of the FIFO queue
(which the validator's static checks cannot see), the policy falls back to the best measured
feasible mapping (all-CPU before anything ran) and records that it did. Nothing that fails the
scenario's checks or the planner's is ever proposed.

The proposal carries a :class:`~hetsched.model.DecisionRecord`: decider, model, every attempt,
fallback and why, the observations as records and exactly as the decider read them, probes
spent, cold start (docs/agentic.md).

The policy keeps no state beyond its monitor and decider: decisions are a function of the
history (plus the LLM's sampling), so a resumed run continues where it stopped.

Imports the model, the monitor, the deciders (``hetsched.deciders``) and the LLM configuration
(``hetsched.llm``; the deciders themselves come from the registry); never the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from hetsched.deciders.base import Decider, DecisionContext, check_mapping
from hetsched.deciders.evidence import fallback_mapping
from hetsched.llm.config import LLMConfig, resolve_llm_config
from hetsched.model import DecisionRecord, InputError, Probe, ProbeRequest, Proposal, RoundRecord
from hetsched.model.learned import learned_cards, model_ranking
from hetsched.model.measured import MODEL_TRIES, Ranked, Settling, executions, measured_mappings, settling
from hetsched.monitor import Monitor, MonitorConfig, Observations
from hetsched.policies.base import Policy, PolicyContext
from hetsched.policies.decider_registry import LLM_DECIDERS, make_decider

RANKING_SEEDS = 4
"""In a space too large to rank whole, the model ranks the best measured mappings (lowest median) and
their one-node moves: this many of them (bounds the cost to about 2 x nodes x this many estimates)."""


class Agentic(Policy):
    """Monitor + decider. See the module docstring.

    Args:
        decider: a decider name (``rules``, ``argmin``, ``openai``, ``local``, ``scripted``) or an instance.
        cold_start: hide the cards from the decider (names, descriptions and measurements only).
        monitor: monitor configuration (or a dict of its fields); default: every mechanism on.
        llm: settings for ``openai``/``local``: an :class:`LLMConfig`, or a dict of its fields
            merged over the environment and config file (``resolve_llm_config``).
        probe_budget: shortcut for ``monitor.probes_per_run``.
        probes_per_round: shortcut for ``monitor.probes_per_round``.
        settle: apply the stopping rule (:func:`~hetsched.model.measured.settling`): once new
            mappings stop beating the best by more than the measured noise, no more probes or new
            mappings; repeat the best, try the mappings the model (the cards as the run's measurements
            left them, :mod:`hetsched.model.learned`) ranks within the noise band of its best
            prediction that never ran (``model_tries`` of its best; not in cold start), repeat the
            mappings measured within the noise of the best, then settle on the best measured one.
            Default: on for real executors, off on the simulator.
        model_tries: how many of the model's best-ranked mappings within the noise band must have
            run before settling (``hetsched.model.measured.MODEL_TRIES``; 0: none).
        decider_options: passed to the decider's constructor (e.g. ``responses`` for ``scripted``).
    """

    name = "agentic"
    adaptive = True

    def __init__(
        self,
        decider: str | Decider = "rules",
        cold_start: bool = False,
        monitor: MonitorConfig | dict[str, Any] | None = None,
        llm: LLMConfig | dict[str, Any] | None = None,
        probe_budget: int | None = None,
        probes_per_round: int | None = None,
        settle: bool | None = None,
        model_tries: int = MODEL_TRIES,
        **decider_options: Any,
    ) -> None:
        super().__init__()
        self.settle = settle
        self._settle = bool(settle)
        if isinstance(model_tries, bool) or not isinstance(model_tries, int) or model_tries < 0:
            raise InputError(f"model_tries must be a whole number >= 0, got {model_tries!r}")
        self.model_tries = model_tries
        self._ranking: tuple[tuple[object, ...], Ranked, object] | None = None
        cfg = monitor if isinstance(monitor, MonitorConfig) else MonitorConfig.from_dict(monitor or {})
        if probe_budget is not None:
            cfg = replace(cfg, probes_per_run=probe_budget)
        if probes_per_round is not None:
            cfg = replace(cfg, probes_per_round=probes_per_round)
        self.monitor_config = cfg
        self.cold_start = cold_start
        if isinstance(decider, Decider):
            if decider_options:
                raise ValueError(f"decider options {sorted(decider_options)} given with a decider instance")
            self.decider = decider
        else:
            is_llm = decider.strip().lower() in LLM_DECIDERS
            if llm and not is_llm:
                raise InputError(f"LLM settings were given, but decider {decider!r} is not an LLM decider "
                                 f"(LLM deciders: {', '.join(LLM_DECIDERS)})")
            llm_cfg = llm if isinstance(llm, LLMConfig) else resolve_llm_config(llm) if is_llm else None
            self.decider = make_decider(decider, llm=llm_cfg, **decider_options)
        self._monitor: Monitor | None = None

    @property
    def monitor(self) -> Monitor:
        """The run's monitor (built by :meth:`reset`); the loop has it observe each round."""
        if self._monitor is None:
            raise RuntimeError("policy 'agentic' used before reset()")
        return self._monitor

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        self._monitor = Monitor(ctx.scenario, self.monitor_config, cards_visible=not self.cold_start)
        self._settle = ctx.measured if self.settle is None else self.settle

    def settling(self, history: Sequence[RoundRecord]) -> Settling | None:
        """Where the run stands on the stopping rule (None when the rule is off)."""
        if not self._settle:
            return None
        if self.cold_start or not self.model_tries:  # cold start: the cards are not the policy's to read
            return settling(history)
        return settling(history, ranked=lambda: self.ranking(history), tries=self.model_tries)

    def ranking(self, history: Sequence[RoundRecord]) -> Ranked:
        """The model's ranking after ``history``: the cards as the run's measurements left them
        (:meth:`LearnedCards.scenario <hetsched.model.learned.LearnedCards.scenario>`) through the
        contention model, every mapping of a small space, else around the ``RANKING_SEEDS`` best
        measured mappings (a cache per history: decisions stay a function of the history)."""
        key = (len(history), id(history[-1]) if history else None)
        if self._ranking is not None and self._ranking[0] == key:
            return self._ranking[1]
        sc = self.ctx.scenario
        model = learned_cards(sc, history).scenario(sc)
        measured = sorted(measured_mappings(executions(history)), key=lambda m: m.median_ms)
        seeds = [m.mapping for m in measured[:RANKING_SEEDS]]
        ranked = model_ranking(model, seeds)
        self._ranking = (key, ranked, history[-1] if history else None)  # keeps the key's object alive
        return ranked

    def next_probe(self, history: Sequence[RoundRecord], probes: Sequence[Probe]) -> ProbeRequest | None:
        """The monitor's next what-if request (the loop executes it); none once exploring stopped."""
        state = self.settling(history)
        if state is not None and not state.exploring:
            return None
        return self.monitor.next_probe(history, probes)

    def propose(
        self, history: Sequence[RoundRecord], probes: Sequence[Probe] = (), observations: Observations | None = None
    ) -> Proposal:
        sc = self.ctx.scenario
        obs = observations if observations is not None else self.monitor.observe(history, probes)
        state = self.settling(history)
        chosen = None if state is None else state.next_mapping
        if state is not None and chosen is not None:
            # settled; a mapping within the noise of the best to repeat; or one the model ranks there to try
            record = DecisionRecord.of(self.decider.name, obs.records, model=self.decider.model,
                                       observations_text=obs.text, probes_spent=len(obs.probes),
                                       cold_start=self.cold_start)
            return Proposal(sc.validate_mapping(chosen), rationale=state.describe(), decision=record)
        decision = self.decider.decide(
            DecisionContext(
                scenario=sc,
                round=len(history),
                rounds=self.ctx.rounds,
                cards_visible=not self.cold_start,
                observations=obs.records,
                observations_text=obs.text,
                planner=self.ctx.planner,
            )
        )
        mapping = decision.mapping
        problem = decision.error
        if mapping is not None:
            bad = check_mapping(sc, mapping)
            if bad:  # a decider bug, never executed
                mapping, problem = None, f"decider {self.decider.name!r} returned an invalid mapping: {bad}"
            elif self.ctx.planner is not None:
                # the validator's checks are static; a FIFO head-of-line deadlock shows only when the
                # model runs the mapping (noise-free), and a mapping that cannot run is never proposed
                refused = self.ctx.planner.infeasibility(mapping)
                if refused is not None:
                    mapping, problem = None, f"the model shows the decider's mapping cannot run: {refused}"
        fallback = mapping is None
        reason = ""
        rationale = decision.rationale
        if mapping is None:
            mapping, why = fallback_mapping(sc, obs.records)
            reason = f"{problem}; {why}" if problem else why
            rationale = f"fallback: {why}"
        record = DecisionRecord.of(
            self.decider.name,
            obs.records,
            model=self.decider.model,
            attempts=decision.transcript,
            fallback=fallback,
            fallback_reason=reason,
            observations_text=obs.text,
            probes_spent=len(obs.probes),
            cold_start=self.cold_start,
        )
        return Proposal(sc.validate_mapping(mapping), rationale=rationale, decision=record)

    def converged(self, history: Sequence[RoundRecord]) -> bool:
        """Settled (when the stopping rule is on), or: the mapping did not change in the last round and no
        unexplored probe is left in budget."""
        state = self.settling(history)
        if state is not None and state.settled:
            return True
        if len(history) < 2 or history[-1].mapping != history[-2].mapping:
            return False
        return self.monitor.pending_probes(history) == 0
