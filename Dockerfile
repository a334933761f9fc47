# The dashboard image (a Hugging Face Docker Space serves it on port 7860).
# Only requirements.txt is installed: no torch, no transformers.
FROM python:3.11-slim

RUN useradd --create-home --uid 1000 user
USER 1000
ENV HOME=/home/user PATH=/home/user/.local/bin:$PATH PYTHONUNBUFFERED=1
WORKDIR /home/user/app

COPY --chown=user requirements.txt .
RUN pip install --no-cache-dir --user -r requirements.txt

COPY --chown=user app.py ./
COPY --chown=user .streamlit ./.streamlit
COPY --chown=user pages ./pages
# the dashboard's part of the headwatch package: its top-level module, the app, analysis and the model families'
# torch-free declarations the model card reads (no job, no training)
COPY --chown=user headwatch/__init__.py ./headwatch/
COPY --chown=user headwatch/dashboard ./headwatch/dashboard
COPY --chown=user headwatch/analysis ./headwatch/analysis
COPY --chown=user headwatch/families ./headwatch/families
COPY --chown=user data ./data

EXPOSE 7860
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:7860/_stcore/health', timeout=4)"]
# headwatch.dashboard.serve turns Streamlit's file watcher off (see dashboard/serve.py)
CMD ["python", "-m", "headwatch.dashboard.serve", "--server.port=7860", "--server.address=0.0.0.0", "--server.headless=true", "--browser.gatherUsageStats=false"]
