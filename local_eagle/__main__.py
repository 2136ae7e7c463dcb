from local_eagle.cli import app

app(prog_name="local-eagle")
