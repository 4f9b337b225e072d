"""The security rules, one test (at least) each. Rules tested here:

- production settings pass `check --deploy`, and relaxing one is reported: test_deploy_check
- secrets come from the environment only (settings, compose, manifests, image): test_secrets
- HTTPS redirect, security headers, Secure/HttpOnly cookies and static files with a long cache
  lifetime, from a production web process: test_production_server
- CSRF on the dashboard's forms and on session-authenticated API writes, not on bearer tokens:
  test_csrf
- every dashboard page and socket route is for staff only: test_dashboard_access
- /metrics shows no API token: test_metrics

Rules tested where their code is tested:

- tokens stored as digests only: tests/api/test_auth.py::test_tokens_are_stored_hashed
- throttling answers 429 with Retry-After: tests/api/test_throttling.py
- tenants isolated (another tenant's workload is a 404): tests/api/test_workloads.py
  ::test_another_tenants_workload_is_404_like_a_missing_one
- dashboard sockets from another origin refused: tests/dashboard/test_consumers.py
  ::test_sockets_from_another_site_are_refused
"""
