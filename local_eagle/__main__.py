from local_eagle.cli.app import app

app(prog_name="local-eagle")
