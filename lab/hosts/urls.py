from django.urls import path

from lab.hosts import views

urlpatterns = [
    path("", views.host_list, name="hosts"),
]
