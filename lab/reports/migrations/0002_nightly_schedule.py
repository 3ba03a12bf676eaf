"""The beat entry that starts the nightly reproducibility runs (editable on the Nightly page)."""

from django.db import migrations


def create_schedule(apps, schema_editor):
    from lab.reports import nightly

    cron = apps.get_model("django_celery_beat", "CrontabSchedule")
    task = apps.get_model("django_celery_beat", "PeriodicTask")
    if task.objects.filter(name=nightly.SCHEDULE_NAME).exists():
        return
    from django.conf import settings

    schedule, _ = cron.objects.get_or_create(
        **nightly.parse_cron(settings.NIGHTLY_CRON), timezone=settings.TIME_ZONE
    )
    task.objects.create(
        name=nightly.SCHEDULE_NAME,
        task=nightly.TASK_NAME,
        crontab=schedule,
        kwargs='{"mode": "sim", "claims": null}',
        description="claims suite and experiments marked nightly",
    )


def remove_schedule(apps, schema_editor):
    from lab.reports import nightly

    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(
        name=nightly.SCHEDULE_NAME
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("reports", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create_schedule, remove_schedule)]
