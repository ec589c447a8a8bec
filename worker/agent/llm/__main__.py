"""``python -m reactq.worker.agent.llm``: serve a scripted model (the offline demo model
by default) over HTTP, for a worker or a client to talk to."""

from reactq.worker.agent.llm.scripted_server import main

if __name__ == "__main__":
    main()
