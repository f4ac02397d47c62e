"""The deploy side: the only code that imports pyinfra.

Facts (one command round trip per layer), operations that yield commands only where a host
differs, one module per layer under ``layers``, and the run of them (``run``). Pure helpers
here (``converge``, ``apt``, ``needs``) import no pyinfra, so the bundle can use them.
"""
