"""Ray's job client API (ray.job_submission) for torus clusters: submit a shell command as a job, follow its output,
stop, list and delete jobs, over the head's Jobs API. It needs neither Ray nor torus's compiled core.

    from torus.job_submission import JobSubmissionClient
    client = JobSubmissionClient("http://127.0.0.1:8265")   # or None: this machine's cluster
    job = client.submit_job(entrypoint="python3 train.py", runtime_env={"working_dir": "./"})
"""

from torus.job_submission._models import DriverInfo, JobDetails, JobErrorType, JobInfo, JobStatus, JobType
from torus.job_submission.sdk import JobSubmissionClient

__all__ = [
    "JobSubmissionClient",
    "JobStatus",
    "JobErrorType",
    "JobInfo",
    "JobDetails",
    "DriverInfo",
    "JobType",
]
