"""``ctxlite serve``: an OpenAI-compatible server that answers over a private context within an ε budget.

The guarantee (ε-bounded Context Influence Decoding, :mod:`ctxlite.influence.cid`): every token is
sampled, exactly and over the whole vocabulary, from p̄_t = softmax((λ_t*·l_D + (1 − λ_t*)·l_∅)/T)
with λ_t* the largest λ' ≤ λ whose distribution is within ε of p_T(·|∅) (checked on the distribution
sampled; :func:`ctxlite.influence.cid.tight_step`), so for every token v

    |log p̄_t(v | D) − log p_T(v | ∅)| ≤ ε            (against the empty context ∅)
    |log p̄_t(v | D) − log p̄_t(v | D')| ≤ 2ε          (against a neighbour D' of D)

where ∅ is the same request with no private context and D' a private context differing from D in
one record. Composition is basic (the losses of the tokens add up): a response of n sampled tokens
(the end-of-generation token included: stopping is a release too) costs n·ε against ∅ and 2n·ε
against a neighbour, and so do the responses of all requests together. :mod:`ctxlite.serve.ledger`
charges the configured ε per token (the realised max_v |log p̄_t(v|D) − log p_T(v|∅)| ≤ ε is reported, never charged:
it depends on D itself, so a budget spent by it would stop at a D-dependent time).

Modules: :mod:`~ctxlite.serve.decoding` (the token loop), :mod:`~ctxlite.serve.ledger` (budgets
and their chained log), :mod:`~ctxlite.serve.service` (one engine behind a lock, the requests'
rules), :mod:`~ctxlite.serve.app` (the HTTP routes), :mod:`~ctxlite.serve.deployment` (a deployment
start to stop: what ``ctxlite serve`` runs).
"""
