"""Every decision rule in the package runs the rule kit shipped in assay.testing."""

from __future__ import annotations

from assay.decision.rule import DecisionRule, FixedPairs
from assay.decision.stats import ExpensiveRule, SequentialRule
from assay.testing.rules import DecisionRuleContract


class TestFixedPairs(DecisionRuleContract):
    def make_rule(self) -> DecisionRule:
        return FixedPairs()


class TestSequentialRule(DecisionRuleContract):
    def make_rule(self) -> DecisionRule:
        return SequentialRule()


class TestExpensiveRule(DecisionRuleContract):
    def make_rule(self) -> DecisionRule:
        return ExpensiveRule()
