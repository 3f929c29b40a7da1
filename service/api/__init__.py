"""The HTTP face: routes, schemas, security, body limits and problem+json errors. A compile
request is admitted here (admission.py) and stored and queued (submission.py); from then on it is
a job of service/jobs/, whose results the routes read back from service/store/."""
