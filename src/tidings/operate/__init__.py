"""The operator's side: what an on-call engineer reads and does.

Status, plans and timelines computed once for the CLI, the API and the dashboard
(``operations``, ``readmodel``), delivery holds, bulk actions, guardrails and the
capacity model. Imports every stage below it; the faces (``cli``, ``api``) import it.
"""
