from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0002_sweep"),
    ]

    operations = [
        migrations.AddField(
            model_name="experiment",
            name="nightly",
            field=models.BooleanField(
                default=False,
                help_text="re-run every night with the claims suite, tracked for regressions",
            ),
        ),
    ]
