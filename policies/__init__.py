"""Gateway admission: the token-budget ledger, tiers, errors and pluggable policies.

This package imports nothing else of the project: it is the pure decision layer shared by the
simulator and the live gateway.
"""

from kvbudget.policies.base import (
    Admitted,
    BasePolicy,
    Completion,
    EngineProbe,
    GatewayView,
    Policy,
    Refuse,
    RevokeLeases,
    Wait,
)
from kvbudget.policies.budget import Lease, TokenBudget
from kvbudget.policies.errors import OVERLOAD_REASONS, Overloaded, OverloadReason, RequestTooLarge
from kvbudget.policies.gateway import (
    Action,
    Admit,
    FrontDoor,
    Gateway,
    GatewayConfig,
    Reject,
    Revoke,
)
from kvbudget.policies.registry import POLICIES, make_policy, policy_names, policy_parameters
from kvbudget.policies.request import Request
from kvbudget.policies.tiers import BATCH, DEFAULT_TIERS, INTERACTIVE, TierConfig

__all__ = [
    "BATCH",
    "DEFAULT_TIERS",
    "INTERACTIVE",
    "OVERLOAD_REASONS",
    "POLICIES",
    "Action",
    "Admit",
    "Admitted",
    "BasePolicy",
    "Completion",
    "EngineProbe",
    "FrontDoor",
    "Gateway",
    "GatewayConfig",
    "GatewayView",
    "Lease",
    "OverloadReason",
    "Overloaded",
    "Policy",
    "Refuse",
    "Reject",
    "Request",
    "RequestTooLarge",
    "Revoke",
    "RevokeLeases",
    "TierConfig",
    "TokenBudget",
    "Wait",
    "make_policy",
    "policy_names",
    "policy_parameters",
]
