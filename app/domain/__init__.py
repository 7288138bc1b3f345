"""The rules of Campaign Board. No FastAPI or Jinja imports here, and no commit():
functions take a Session, change and flush; the caller commits once."""
