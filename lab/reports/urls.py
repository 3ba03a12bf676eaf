from django.urls import path

from lab.reports import views

urlpatterns = [
    path("claims/", views.claims, name="claims"),
    path("claims/live/", views.claims_live, name="claims-live"),
    path("claims/<slug:claim_id>/reproduce/", views.claim_reproduce, name="claim-reproduce"),
    path("claims/checks/<int:pk>/figure.png", views.claim_figure, name="claim-figure"),
    path("nightly/", views.nightly, name="nightly"),
    path("nightly/schedule/", views.nightly_schedule, name="nightly-schedule"),
    path("nightly/run-now/", views.nightly_run_now, name="nightly-run-now"),
    path("nightly/expected/", views.expected_change, name="nightly-expected"),
    path("nightly/alerts/<int:pk>/close/", views.alert_close, name="alert-close"),
    path("nightly/<int:pk>/", views.nightly_detail, name="nightly-detail"),
    path("nightly/history.png", views.history_png, name="nightly-history-png"),
    path("experiments/<int:pk>/nightly/", views.experiment_nightly, name="experiment-nightly"),
]
