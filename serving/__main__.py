from serving.command import serve

serve(prog_name="python -m serving")
